#!/usr/bin/env bash
# Builds the benchmarks (Release, -march=native) and runs them against PyTorch: the kernels, then
# training steps (seed model, MLP, CNN; 1 thread), then DataParallel's training throughput on 1, 2,
# ... CPU devices (up to nproc), then DistributedDataParallel across processes against the compute
# floor, DataParallel, PyTorch's DDP and a raw Gloo allreduce (as root also over a 1 Gbit/s shaped
# link between two network namespaces); prints the tables, writes
# bench/results/{kernels,training,data_parallel,ddp}.json and the tables in docs/benchmarks.md.
#
#   bash scripts/bench.sh                 # 1 thread, then nproc threads; dparallel and PyTorch alike
#   bash scripts/bench.sh --threads 2     # arguments go to bench_kernels (see --help)
#
# Run it on a quiet machine: other work running at the same time shows up in the max column first.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"
BUILD_DIR=${DP_BUILD_DIR:-build}

dp_install_deps
dp_build "$BUILD_DIR" -DDP_BUILD_BENCH=ON -- bench_kernels bench_training bench_data_parallel bench_ddp
threads=1
[[ $(nproc) -gt 1 ]] && threads="1,$(nproc)"
"$BUILD_DIR/bench/bench_kernels" --threads "$threads" --root "$DP_ROOT" "$@"
"$BUILD_DIR/bench/bench_training" --threads 1 --root "$DP_ROOT"
# DataParallel on up to nproc CPU devices (at least 2, the targets' configuration).
devices_max=$(nproc)
[[ $devices_max -lt 2 ]] && devices_max=2
"$BUILD_DIR/bench/bench_data_parallel" --devices-max "$devices_max" --root "$DP_ROOT"
# DDP on 1 and 2 processes (the program starts its own workers; SCHED_FIFO where permitted). As
# root, also the shaped-link rows: the two ranks in two network namespaces over a veth pair limited
# to 1 Gbit/s with tc (bench_ddp --shaped; it makes and removes the namespaces itself).
ddp_args=()
[[ $(id -u) -eq 0 ]] && ddp_args+=(--shaped 1gbit)
"$BUILD_DIR/bench/bench_ddp" --root "$DP_ROOT" ${ddp_args[@]+"${ddp_args[@]}"}
