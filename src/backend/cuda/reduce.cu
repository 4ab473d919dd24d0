// CUDA reductions: sum, mean, max / min values, max / min with indices (argmax / argmin), var / std,
// logsumexp and p-norms. Every op is an accumulator struct (cuda/reduce_ops.h) run by one kernel
// template, reduce_kernel, in the shape the host picked (cuda/reduce_config.h):
//  - rows:    a warp or a block per output walks its reduced elements (contiguous when the reduced
//             dim is the inner one), then a shuffle / shared-memory reduction;
//  - columns: each thread owns an output (consecutive threads, consecutive outputs) and walks its
//             rows; the block's rows of threads split the rows and combine through shared memory.
// When the outputs are too few to fill the GPU, the reduced space is split across blocks (grid y)
// and a second kernel combines the partial accumulators of each output, in split order. No
// atomics: the same input on the same GPU gives the same bits.
#include <cuda_runtime.h>
#include <algorithm>
#include <atomic>
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"
#include "backend/dispatch.h"
#include "backend/reduce_plan.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/reduce.h"
#include "backend/cuda/reduce_config.h"
#include "backend/cuda/reduce_ops.h"

namespace dp::backend::cuda {

namespace {

using detail::ReduceLaunch;
using detail::ReduceParams;

// ---------------------------------------------------------------- the two kernels

template <typename T, typename Op>
__global__ void __launch_bounds__(detail::kReduceThreads)
    reduce_kernel(const ReduceParams p, const ReduceLaunch l, const Op op, const T* __restrict__ in, typename Op::acc_t* __restrict__ partial) {
  using A = typename Op::acc_t;
  __shared__ alignas(16) unsigned char smem_raw[detail::kReduceThreads * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t split = blockIdx.y;
  const detail::Range range = detail::split_range(p, l, split);
  auto combine = [&op](const A& a, const A& b) { return op.combine(a, b); };
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    const detail::ThreadWork w = detail::thread_work(l, g, tx, ty, range.begin);
    const bool live = w.o < p.out_numel;
    int64_t in_off = 0, out_off = 0;
    if (live) p.kept_offsets(w.o, in_off, out_off);
    A acc = op.identity();
    if (live) acc = detail::reduce_range(p, op, in + in_off, w.r0, range.end, w.step, acc);
    bool owner;  // the thread that holds o's total
    if (l.rows) {
      acc = detail::group_allreduce(acc, l.block_x, smem, combine);
      owner = tx == 0;
    } else {
      if (l.block_y > 1) {
        smem[ty * l.block_x + tx] = acc;
        __syncthreads();
        if (ty == 0)
          for (int k = 1; k < l.block_y; ++k) acc = op.combine(acc, smem[k * l.block_x + tx]);
        __syncthreads();
      }
      owner = ty == 0;
    }
    if (owner && live) {
      if (l.splits == 1)
        op.store(acc, out_off);
      else
        partial[w.o * l.splits + split] = acc;
    }
  }
}

// The second pass when the reduced space was split: a warp per output (blockDim (32, 8)) combines
// its `splits` partial accumulators.
template <typename Op>
__global__ void __launch_bounds__(256)
    combine_kernel(const ReduceParams p, int64_t groups, int64_t splits, const Op op, const typename Op::acc_t* __restrict__ partial) {
  using A = typename Op::acc_t;
  auto combine = [&op](const A& a, const A& b) { return op.combine(a, b); };
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t o = g * 8 + threadIdx.y;
    if (o >= p.out_numel) continue;  // the whole warp
    A acc = op.identity();
    for (int64_t s = threadIdx.x; s < splits; s += 32) acc = op.combine(acc, partial[o * splits + s]);
    acc = detail::warp_reduce(acc, combine);
    if (threadIdx.x == 0) {
      int64_t in_off = 0, out_off = 0;
      p.kept_offsets(o, in_off, out_off);
      op.store(acc, out_off);
    }
  }
}

template <typename T, typename Op>
void launch_reduce(const char* name, const backend::ReducePlan& plan, const Tensor& in, const Tensor& out, const Op& op) {
  if (plan.out_numel == 0) return;
  using A = typename Op::acc_t;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  const ReduceParams p = detail::make_reduce_params(plan, name);
  const ReduceLaunch l = detail::choose_reduce_launch(plan, detail::multiprocessor_count(dev));
  cudaStream_t stream = current_stream(dev).handle();
  // Partial accumulators, [output][split]. Freed when this returns: the caching allocator hands
  // the block out again only to work ordered after these kernels on this stream.
  Tensor scratch;
  A* partial = nullptr;
  if (l.splits > 1) {
    scratch = make_empty({plan.out_numel * l.splits * static_cast<int64_t>(sizeof(A))}, kUInt8, out.device());
    partial = static_cast<A*>(scratch.data_ptr());
  }
  const T* src = in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr;
  const dim3 grid(static_cast<unsigned>(l.grid_x), static_cast<unsigned>(l.splits));
  reduce_kernel<T, Op><<<grid, dim3(l.block_x, l.block_y), 0, stream>>>(p, l, op, src, partial);
  DP_CUDA_CHECK(cudaGetLastError());
  if (l.splits > 1) {
    const int64_t groups = detail::ceil_div(plan.out_numel, 8);
    const unsigned blocks = static_cast<unsigned>(std::min(groups, detail::kMaxGridX));
    combine_kernel<Op><<<blocks, dim3(32, 8), 0, stream>>>(p, groups, l.splits, op, partial);
    DP_CUDA_CHECK(cudaGetLastError());
  }
}

void check_devices(const char* name, const Tensor& out, const Tensor& in) {
  DP_CHECK(in.device() == out.device(), DeviceError, name, ": expected all tensors to be on the same device, but found at least two devices, ",
           out.device().str(), " and ", in.device().str(), "!");
}

// ---------------------------------------------------------------- sum / mean

template <typename T>
void run_sum(const char* name, const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, double divisor) {
  const backend::ReducePlan plan = backend::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  if constexpr (backend::is_float_v<T>) {
    using A = detail::facc_t<T>;
    launch_reduce<T>(name, plan, in, out, detail::SumOp<T, A, T>{out.data_ptr<T>(), static_cast<A>(divisor)});
  } else {
    launch_reduce<T>(name, plan, in, out, detail::SumOp<T, int64_t, int64_t>{out.data_ptr<int64_t>(), 1});
  }
}

}  // namespace

// ---------------------------------------------------------------- entry points

void sum_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("sum", out, in);
  backend::dispatch_all(in.dtype(), "sum", [&]<typename T>() {
    DP_CHECK(out.dtype() == (backend::is_float_v<T> ? in.dtype() : kInt64), DTypeError, "sum: internal dtype mismatch");
    run_sum<T>("sum", out, in, reduced, keepdim, 1.0);
  });
}

void mean_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("mean", out, in);
  const double n = static_cast<double>(backend::reduced_numel(in.sizes(), reduced));
  backend::dispatch_floating(in.dtype(), "mean", [&]<typename T>() { run_sum<T>("mean", out, in, reduced, keepdim, n); });
}

void minmax_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_devices(name, out, in);
  const backend::ReducePlan plan = backend::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  backend::dispatch_all(in.dtype(), name, [&]<typename T>() {
    using V = detail::cmp_t<T>;
    launch_reduce<T>(name, plan, in, out, detail::ExtremeOp<T>{out.data_ptr<T>(), detail::extreme_identity<V>(is_max), is_max});
  });
}

void minmax_index_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max) {
  const char* name = indices.defined() && !values.defined() ? (is_max ? "argmax" : "argmin") : (is_max ? "max" : "min");
  const Tensor& shape_ref = values.defined() ? values : indices;
  check_devices(name, shape_ref, in);
  if (values.defined() && indices.defined()) {
    check_devices(name, indices, in);
    DP_CHECK(values.strides() == indices.strides(), ValueError, name, ": values and indices must share a layout");
  }
  std::vector<bool> reduced(static_cast<size_t>(in.dim()), false);
  if (in.dim() > 0) reduced[dim] = true;
  // One reduced dim: the reduced index r is the position along it, whatever the reordering.
  const backend::ReducePlan plan = backend::make_reduce_plan(shape_ref, in, reduced, keepdim, /*reorder=*/true);
  backend::dispatch_all(in.dtype(), name, [&]<typename T>() {
    using V = detail::cmp_t<T>;
    detail::ExtremeIndexOp<T> op{values.defined() ? values.data_ptr<T>() : nullptr, indices.defined() ? indices.data_ptr<int64_t>() : nullptr,
                                 detail::extreme_identity<V>(is_max), is_max};
    launch_reduce<T>(name, plan, in, shape_ref, op);
  });
}

void var_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt) {
  const char* name = take_sqrt ? "std" : "var";
  check_devices(name, out, in);
  const backend::ReducePlan plan = backend::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  backend::dispatch_floating(in.dtype(), name, [&]<typename T>() {
    using A = detail::facc_t<T>;
    launch_reduce<T>(name, plan, in, out, detail::VarOp<T>{out.data_ptr<T>(), static_cast<A>(correction), take_sqrt});
  });
}

void logsumexp_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("logsumexp", out, in);
  const backend::ReducePlan plan = backend::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  backend::dispatch_floating(in.dtype(), "logsumexp",
                             [&]<typename T>() { launch_reduce<T>("logsumexp", plan, in, out, detail::LseOp<T>{out.data_ptr<T>()}); });
}

void norm_kernel(const Tensor& out, const Tensor& in, double p) {
  check_devices("norm", out, in);
  const std::vector<bool> reduced(static_cast<size_t>(in.dim()), true);
  const backend::ReducePlan plan = backend::make_reduce_plan(out, in, reduced, /*keepdim=*/false, /*reorder=*/true);
  const detail::NormKind kind = detail::norm_kind(p);
  backend::dispatch_floating(in.dtype(), "norm", [&]<typename T>() {
    using A = detail::facc_t<T>;
    launch_reduce<T>("norm", plan, in, out, detail::NormOp<T>{out.data_ptr<T>(), kind, static_cast<A>(p)});
  });
}

}  // namespace dp::backend::cuda
