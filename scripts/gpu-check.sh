#!/usr/bin/env bash
# Run ON A LENT GPU MACHINE (the device tool), from the repository root, with .gpudeps carried
# (scripts/gpu-deps.sh fills it here first). One stage per call, so each fits a call's 10 minutes;
# the build folder build-gpu stays on the warm machine between calls:
#
#   bash scripts/gpu-check.sh build      # configure (sm_90 only) and build everything
#   bash scripts/gpu-check.sh test       # the whole suite (GPU tests run), then the parallel tests
#                                        # again with 2 and 4 virtual devices
#   bash scripts/gpu-check.sh sanitize   # compute-sanitizer memcheck + racecheck on the CUDA tests
#   bash scripts/gpu-check.sh bench      # bench_cuda_training and bench_cuda_data_parallel
#
# Logs and results go to $OUT (at most 8 files come back): build.log, ctest.log, ctest-virtual.log,
# sanitizer.log, bench.log, cuda_training.json, cuda_data_parallel.json, benchmarks.md.
set -uo pipefail
stage=${1:?usage: gpu-check.sh build|test|sanitize|bench}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
D=/tmp/gpudeps
if [[ ! -d $D/usr ]]; then
  mkdir -p $D
  for f in .gpudeps/*.deb; do dpkg -x "$f" $D; done
fi
LIB=$D/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$LIB:$LIB/openblas-pthread:${LD_LIBRARY_PATH:-}
zlib=$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)

case $stage in
build)
  nvidia-smi -L
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$D/usr;$LIB/cmake;$D/usr/share/cmake" \
    -DBLAS_LIBRARIES=$LIB/openblas-pthread/libopenblas.so -DCBLAS_INCLUDE_DIR=$D/usr/include/x86_64-linux-gnu/openblas-pthread \
    -DZLIB_LIBRARY="$zlib" -DZLIB_INCLUDE_DIR=$D/usr/include 2>&1 | tee "$OUT/build.log"
  cmake --build build-gpu -j16 2>&1 | tail -40 | tee -a "$OUT/build.log"
  ;;
test)
  nvidia-smi -L | tee "$OUT/ctest.log"
  git rev-parse HEAD | tee -a "$OUT/ctest.log"
  ctest --test-dir build-gpu -j8 --timeout 300 --output-on-failure 2>&1 | tail -300 >> "$OUT/ctest.log"
  tail -15 "$OUT/ctest.log"
  for n in 2 4; do
    echo "== DP_CUDA_VIRTUAL_DEVICES=$n" | tee -a "$OUT/ctest-virtual.log"
    DP_CUDA_VIRTUAL_DEVICES=$n ctest --test-dir build-gpu -j4 -L 'parallel|examples|cuda' --timeout 300 --output-on-failure 2>&1 | tail -100 >> "$OUT/ctest-virtual.log"
    tail -3 "$OUT/ctest-virtual.log"
  done
  ;;
sanitize)
  : > "$OUT/sanitizer.log"
  for t in build-gpu/tests/test_cuda_*; do
    [[ -x $t ]] || continue
    for tool in memcheck racecheck; do
      echo "== $tool $(basename "$t")" | tee -a "$OUT/sanitizer.log"
      DP_CUDA_VIRTUAL_DEVICES=2 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$t" --gtest_brief=1 2>&1 | tail -25 >> "$OUT/sanitizer.log"
      echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/sanitizer.log"
    done
  done
  ;;
bench)
  build-gpu/bench/bench_cuda_training --root . 2>&1 | tee "$OUT/bench.log"
  build-gpu/bench/bench_cuda_data_parallel --root . 2>&1 | tee -a "$OUT/bench.log"
  cp bench/results/cuda_training.json bench/results/cuda_data_parallel.json docs/benchmarks.md "$OUT/" 2>/dev/null
  ;;
*)
  echo "gpu-check: unknown stage $stage" >&2
  exit 2
  ;;
esac
