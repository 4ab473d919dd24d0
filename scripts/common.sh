# Shared by the scripts in this folder (sourced, not run): repository root, build folder, jobs, and
# one configure-and-build function. Every setting can be overridden from the environment:
#   DP_BUILD_DIR  build folder (default: build, or build-asan / build-tsan for sanitize.sh)
#   DP_JOBS       parallel compile jobs (default: nproc)
#   DP_SKIP_DEPS  set to 1 to skip scripts/install-deps.sh

DP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DP_JOBS=${DP_JOBS:-$(nproc)}

dp_install_deps() {
  if [[ "${DP_SKIP_DEPS:-0}" != 1 ]]; then
    bash "$DP_ROOT/scripts/install-deps.sh"
  fi
}

# The sanitizers' run-time options (scripts/sanitize.sh explains them).
DP_ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:protect_shadow_gap=0:allocator_may_return_null=1"
DP_UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# dp_build DIR [cmake -D options...] [-- targets...]: configures DIR (Ninja, Release unless an
# option says otherwise; ccache is picked up by CMakeLists.txt when installed) and builds the
# targets (all when none are given).
dp_build() {
  local dir=$1; shift
  local opts=() targets=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do opts+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  targets=("$@")
  local gen=(-G Ninja)
  if [[ -f "$dir/CMakeCache.txt" ]]; then
    # An existing folder keeps its generator (CMake refuses to switch one).
    gen=()
  fi
  cmake -S "$DP_ROOT" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${opts[@]}"
  local t=()
  for x in "${targets[@]}"; do t+=(--target "$x"); done
  cmake --build "$dir" -j "$DP_JOBS" "${t[@]}"
}
