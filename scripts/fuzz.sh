#!/usr/bin/env bash
# Runs one fuzz target (fuzz/<target>.cpp) with libFuzzer under AddressSanitizer + UBSan for a
# given time, starting from its seed corpus fuzz/corpus/<target>/.
#
#   bash scripts/fuzz.sh safetensors_reader 600     # 10 minutes
#   bash scripts/fuzz.sh idx_reader 600 -jobs=1     # extra arguments go to libFuzzer
#   targets: safetensors_reader, idx_reader, text_data, checkpoint_metadata, store_protocol
#
# Builds with Debian's clang (installed here with apt when missing: clang and its compiler-rt,
# which holds libFuzzer; a development tool only, the normal build and tests use gcc) in build-fuzz/
# (DP_BUILD_DIR): the library instrumented for coverage (-fsanitize=fuzzer-no-link) and built with
# -DDP_SANITIZE=address (ASan + UBSan, every UBSan report fatal), then the target as fuzz_<target>.
# New inputs libFuzzer finds go to build-fuzz/corpus/<target>/ (the seed corpus is not modified);
# a crasher is written to build-fuzz/crash-* and the run fails: add it to fuzz/corpus/<target>/ as
# a regression input once fixed. The last lines of the log give the executions run (stat::
# number_of_executed_units) and the time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"

target=${1:-}
seconds=${2:-}
if [[ -z "$target" || -z "$seconds" || ! -f "fuzz/$target.cpp" ]]; then
  echo "usage: bash scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]   (targets: $(cd fuzz && ls *.cpp | grep -v replay_main | sed 's/\.cpp$//' | tr '\n' ' '))" >&2
  exit 2
fi
shift 2
BUILD_DIR=${DP_BUILD_DIR:-build-fuzz}

if ! command -v clang++ > /dev/null || ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" > /dev/null; then
  echo "== fuzz.sh: installing clang and libFuzzer (apt-get install clang libclang-rt-dev)"
  SUDO=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq clang libclang-rt-dev
fi
dp_install_deps

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:protect_shadow_gap=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# Only what the targets need: no CUDA, examples, benchmarks; the tests folder defines the targets.
dp_build "$BUILD_DIR" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDP_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug \
  -DDP_WITH_CUDA=OFF -DDP_BUILD_EXAMPLES=OFF -DDP_BUILD_BENCH=OFF -DDP_FUZZ_LIBFUZZER=ON \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link" -- "fuzz_$target"

corpus="$BUILD_DIR/corpus/$target"
mkdir -p "$corpus"
echo "== fuzz.sh: fuzz_$target for $seconds s (corpus $corpus, seeds fuzz/corpus/$target)"
cd "$BUILD_DIR"
# -rss_limit_mb: an input that makes the reader allocate more than 2 GB is a finding too.
exec "./tests/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 -timeout=25 \
  -artifact_prefix="$PWD/" "$@" "corpus/$target" "$DP_ROOT/fuzz/corpus/$target"
