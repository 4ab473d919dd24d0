// CUDA reductions (src/backend/cuda/reduce.cu): sum, mean, max / min (values, values + indices, argmax /
// argmin), amax, var / std, logsumexp and norm against the CPU, over dims lists, keepdim, every
// layout (contiguous, transposed, sliced, broadcast), every dtype the CPU takes, empty and 0-dim
// tensors, NaN / inf, index ties, large reductions that split across blocks; determinism, the
// current stream, and kernels writing every output element (poisoned outputs).
// The launch plan (cuda/reduce_config.h: integer division, plan -> kernel parameters, kernel shape
// and split) is plain C++ and is tested on any machine; everything else needs a GPU and skips,
// saying why, without one.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "backend/cpu/reduce.h"
#include "backend/cuda/reduce_config.h"
#include "backend/cuda/reduce_ops.h"
#include "reduce_compare.h"
#include "support/cuda.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#include "backend/cuda/reduce.h"
#endif

namespace dp {
namespace {

using backend::cuda::detail::choose_reduce_launch;
using backend::cuda::detail::IntDivider;
using backend::cuda::detail::make_reduce_params;
using backend::cuda::detail::ReduceLaunch;
using backend::ReducePlan;
using test::expect_matches_cpu;
using test::kGpu;
using test::sample;

// ================================================================ host: the launch plan

TEST(CudaReducePlan, IntDividerMatchesDivision) {
  std::mt19937 rng(7);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 10, 31, 32, 33, 1000, 65535, 65536, 65537, 1u << 30, (1u << 30) + 1, INT32_MAX - 1, INT32_MAX};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % INT32_MAX);
  for (uint32_t d : divisors) {
    const IntDivider div(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * (d % (1u << 30)), INT32_MAX - 1, INT32_MAX};
    for (int i = 0; i < 300; ++i) ns.push_back(rng() % (uint32_t{INT32_MAX} + 1));
    for (uint32_t n : ns) {
      if (n > uint32_t{INT32_MAX}) continue;
      ASSERT_EQ(div.div(n), n / d) << n << " / " << d;
    }
  }
  EXPECT_THROW(IntDivider(0), ValueError);
  EXPECT_THROW(IntDivider(uint32_t{INT32_MAX} + 1), ValueError);
}

// Every (output, reduced) index maps to the offsets the CPU's plan walk gives, with 32-bit and
// 64-bit index math.
void expect_params_walk_plan(const ReducePlan& plan) {
  std::vector<std::pair<int64_t, int64_t>> kept;
  backend::cpu::for_each_offset(plan.ksize.data(), plan.kin.data(), plan.kout.data(), static_cast<int>(plan.ksize.size()),
                                [&](int64_t i, int64_t o) { kept.emplace_back(i, o); });
  std::vector<int64_t> red;
  backend::cpu::for_each_offset(plan.rsize.data(), plan.rin.data(), nullptr, static_cast<int>(plan.rsize.size()),
                                [&](int64_t i, int64_t) { red.push_back(i); });
  ASSERT_EQ(static_cast<int64_t>(kept.size()), plan.out_numel);
  ASSERT_EQ(static_cast<int64_t>(red.size()), plan.red_numel);
  for (bool idx32 : {true, false}) {
    auto p = make_reduce_params(plan, "test");
    EXPECT_TRUE(p.idx32);
    p.idx32 = idx32;
    for (int64_t o = 0; o < plan.out_numel; ++o) {
      int64_t i = -1, w = -1;
      p.kept_offsets(o, i, w);
      ASSERT_EQ(i, kept[o].first) << "output " << o << " idx32 " << idx32;
      ASSERT_EQ(w, kept[o].second) << "output " << o << " idx32 " << idx32;
    }
    for (int64_t r = 0; r < plan.red_numel; ++r) ASSERT_EQ(p.reduced_offset(r), red[r]) << "reduced " << r << " idx32 " << idx32;
  }
}

TEST(CudaReducePlan, ParamsWalkTheSameOffsetsAsThePlan) {
  // [4, 3, 5, 2] contiguous, reduce dims 1 and 3 (not mergeable: two reduced dims).
  expect_params_walk_plan(backend::make_reduce_plan({4, 3, 5, 2}, {30, 10, 2, 1}, {false, true, false, true}, {5, 0, 1, 0}, true));
  // A permuted layout (strides not decreasing), keepdim-style output strides.
  expect_params_walk_plan(backend::make_reduce_plan({3, 4, 5}, {1, 15, 3}, {false, true, false}, {5, 0, 1}, true));
  // Broadcast (stride 0) kept and reduced dims.
  expect_params_walk_plan(backend::make_reduce_plan({6, 7, 2}, {0, 2, 1}, {true, false, true}, {0, 1, 0}, true));
  // Everything reduced; nothing reduced; a 0-dim input.
  expect_params_walk_plan(backend::make_reduce_plan({5, 6}, {6, 1}, {true, true}, {0, 0}, true));
  expect_params_walk_plan(backend::make_reduce_plan({5, 6}, {6, 1}, {false, false}, {6, 1}, true));
  expect_params_walk_plan(backend::make_reduce_plan(Shape{}, Shape{}, std::vector<bool>{}, Shape{}, true));
  // Empty: a reduced dim of size 0 (nothing to walk, but the parameters are still made).
  expect_params_walk_plan(backend::make_reduce_plan({4, 0, 3}, {3, 3, 1}, {false, true, true}, {1, 0, 0}, true));
  // Reduced index order without reordering (what index reductions rely on: row-major r).
  expect_params_walk_plan(backend::make_reduce_plan({3, 4, 5}, {1, 15, 3}, {true, false, true}, {0, 1, 0}, false));
}

TEST(CudaReducePlan, TooManyDimsIsANotImplementedErrorNamingTheOp) {
  // 34 dims of size 2, alternately kept and reduced: nothing merges, 17 kept and 17 reduced.
  const int nd = 34;
  std::vector<int64_t> sizes(nd, 2), strides(nd), ost(nd, 0);
  std::vector<bool> reduced(nd);
  for (int d = 0; d < nd; ++d) {
    strides[d] = int64_t{1} << (nd - 1 - d);
    reduced[d] = d % 2 == 1;
  }
  for (int d = 0, k = 0; d < nd; ++d)
    if (!reduced[d]) ost[d] = int64_t{1} << (16 - k++);
  const ReducePlan plan = backend::make_reduce_plan(sizes, strides, reduced, ost, true);
  ASSERT_EQ(plan.ksize.size(), 17u);
  try {
    make_reduce_params(plan, "logsumexp");
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("logsumexp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("17"), std::string::npos) << e.what();
  }
}

void expect_launch_invariants(const ReducePlan& plan, const ReduceLaunch& l) {
  EXPECT_EQ(l.block_x * l.block_y, backend::cuda::detail::kReduceThreads);
  EXPECT_GE(l.block_x, l.rows ? 32 : 1);
  const int64_t per_group = l.rows ? l.block_y : l.block_x;
  EXPECT_GE(l.groups * per_group, plan.out_numel);
  EXPECT_LT((l.groups - 1) * per_group, std::max<int64_t>(plan.out_numel, 1));
  EXPECT_GE(l.grid_x, 1);
  EXPECT_LE(l.grid_x, l.groups);
  EXPECT_GE(l.splits, 1);
  EXPECT_LE(l.splits, backend::cuda::detail::kMaxGridY);
  EXPECT_GE(l.splits * l.chunk, plan.red_numel);  // every reduced element in some split
  if (l.splits > 1) {
    EXPECT_LT((l.splits - 1) * l.chunk, plan.red_numel);
  }  // no empty split
}

ReducePlan contiguous_plan(const Shape& sizes, const std::vector<bool>& reduced) {
  const Shape st = contiguous_strides(sizes);
  Shape ost(sizes.size(), 0);
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d)
    if (!reduced[d]) {
      ost[d] = s;
      s *= sizes[d];
    }
  return backend::make_reduce_plan(sizes, st, reduced, ost, true);
}

TEST(CudaReducePlan, KernelShapeAndSplit) {
  constexpr int kSms = 132;
  {  // softmax-like: the last dim, short rows: a small group per row, no split
    const ReducePlan p = contiguous_plan({1000, 512}, {false, true});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_TRUE(l.rows);
    EXPECT_EQ(l.block_x, 64);
    EXPECT_EQ(l.splits, 1);
  }
  {  // short contiguous rows: columns, a thread per output reading its row
    const ReducePlan p = contiguous_plan({1 << 20, 4}, {false, true});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_y, 1);
  }
  {  // everything of a long vector: a block, split across the GPU
    const ReducePlan p = contiguous_plan({1 << 24}, {true});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_TRUE(l.rows);
    EXPECT_EQ(l.block_x, 256);
    EXPECT_EQ(l.splits, 8 * kSms);
  }
  {  // leading dim of a tall matrix (a bias gradient): columns, rows split in and across blocks
    const ReducePlan p = contiguous_plan({100000, 64}, {true, false});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_y, 8);
    EXPECT_GT(l.splits, 1);
  }
  {  // leading dim with many outputs: one thread per output, whole columns
    const ReducePlan p = contiguous_plan({8, 1 << 20}, {true, false});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_y, 1);
    EXPECT_EQ(l.splits, 1);
  }
  {  // nothing to reduce (a size-1 dim): columns of one element
    const ReducePlan p = contiguous_plan({5, 1, 7}, {false, true, false});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_y, 1);
  }
  {  // a transposed input reduced along its strided dim: columns (the kept dim is contiguous)
    const ReducePlan p = backend::make_reduce_plan({64, 1000}, {1, 64}, {false, true}, {1, 0}, true);
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_FALSE(l.rows);
  }
  {  // an empty reduction: one split of nothing
    const ReducePlan p = contiguous_plan({5, 0}, {false, true});
    const ReduceLaunch l = choose_reduce_launch(p, kSms);
    expect_launch_invariants(p, l);
    EXPECT_EQ(l.splits, 1);
    EXPECT_EQ(l.chunk, 0);
  }
  // Invariants over a sweep of shapes and SM counts.
  for (int sms : {1, 8, 132}) {
    for (int64_t a : {1, 3, 64, 1000, 70000})
      for (int64_t b : {1, 2, 31, 257, 5000}) {
        for (auto mask : {std::vector<bool>{true, false}, std::vector<bool>{false, true}, std::vector<bool>{true, true}}) {
          const ReducePlan p = contiguous_plan({a, b}, mask);
          expect_launch_invariants(p, choose_reduce_launch(p, sms));
        }
      }
  }
}

// ================================================================ host: the kernels' schedule, emulated

// reduce_kernel and combine_kernel (src/backend/cuda/reduce.cu) run on the host: every block of the grid,
// every thread's work (cuda/reduce_ops.h: thread_work, reduce_range, the ops), the in-group and
// cross-split combinations in the kernels' order. Checks the split of the work, the ops and the
// combination order (ties, NaN, moments) against the CPU kernels on any machine.
template <typename T, typename Op>
void emulate_reduce(const ReducePlan& plan, const T* in, const Op& op, int sms) {
  using A = typename Op::acc_t;
  namespace cd = backend::cuda::detail;
  if (plan.out_numel == 0) return;
  const cd::ReduceParams p = make_reduce_params(plan, "emulated");
  const ReduceLaunch l = choose_reduce_launch(plan, sms);
  auto combine = [&op](const A& x, const A& y) { return op.combine(x, y); };
  std::vector<A> partial(static_cast<size_t>(l.splits > 1 ? plan.out_numel * l.splits : 0));
  auto finish = [&](const A& t, int64_t o, int64_t split) {
    if (l.splits > 1) {
      partial[static_cast<size_t>(o * l.splits + split)] = t;
      return;
    }
    int64_t in_off = 0, out_off = 0;
    p.kept_offsets(o, in_off, out_off);
    op.store(t, out_off);
  };
  std::vector<A> acc(static_cast<size_t>(l.block_x * l.block_y));
  for (int64_t split = 0; split < l.splits; ++split) {
    const cd::Range range = cd::split_range(p, l, split);
    for (int64_t g = 0; g < l.groups; ++g) {
      for (int ty = 0; ty < l.block_y; ++ty)
        for (int tx = 0; tx < l.block_x; ++tx) {
          const cd::ThreadWork w = cd::thread_work(l, g, tx, ty, range.begin);
          A a = op.identity();
          if (w.o < p.out_numel) {
            int64_t in_off = 0, out_off = 0;
            p.kept_offsets(w.o, in_off, out_off);
            a = cd::reduce_range(p, op, in + in_off, w.r0, range.end, w.step, a);
          }
          acc[static_cast<size_t>(ty * l.block_x + tx)] = a;
        }
      if (l.rows) {
        for (int ty = 0; ty < l.block_y; ++ty) {
          const int64_t o = cd::thread_work(l, g, 0, ty, range.begin).o;
          const auto first = acc.begin() + ty * l.block_x;
          const A t = test::emulate_group_reduce(std::vector<A>(first, first + l.block_x), combine);
          if (o < p.out_numel) finish(t, o, split);
        }
      } else {
        for (int tx = 0; tx < l.block_x; ++tx) {
          const int64_t o = cd::thread_work(l, g, tx, 0, range.begin).o;
          A t = acc[static_cast<size_t>(tx)];
          for (int k = 1; k < l.block_y; ++k) t = op.combine(t, acc[static_cast<size_t>(k * l.block_x + tx)]);
          if (o < p.out_numel) finish(t, o, split);
        }
      }
    }
  }
  if (l.splits == 1) return;
  for (int64_t o = 0; o < p.out_numel; ++o) {  // combine_kernel: a warp per output
    std::vector<A> lanes(32, op.identity());
    for (int64_t s = 0; s < l.splits; ++s)
      lanes[static_cast<size_t>(s % 32)] = op.combine(lanes[static_cast<size_t>(s % 32)], partial[static_cast<size_t>(o * l.splits + s)]);
    int64_t in_off = 0, out_off = 0;
    p.kept_offsets(o, in_off, out_off);
    op.store(test::emulate_group_reduce(lanes, combine), out_off);
  }
}

// The CUDA entry points' setup (src/backend/cuda/reduce.cu) over host tensors, with the emulated launch.
enum class Red { Sum, Mean, Amax, Amin, Var, Std, Lse };

Tensor emulated(Red r, const Tensor& in, const Shape& dims, bool keepdim, int sms, int64_t correction = 1) {
  namespace cd = backend::cuda::detail;
  const std::vector<bool> mask = backend::make_dim_mask(dims, in.dim(), "emulated");
  const DType out_dt = r == Red::Sum && !is_floating_point(in.dtype()) ? kInt64 : in.dtype();
  Tensor out = full(backend::reduced_shape(in.sizes(), mask, keepdim), 12345, TensorOptions().dtype(out_dt));
  const ReducePlan plan = backend::make_reduce_plan(out, in, mask, keepdim, true);
  const double n = static_cast<double>(backend::reduced_numel(in.sizes(), mask));
  backend::dispatch_all(in.dtype(), "emulated", [&]<typename T>() {
    const T* src = in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr;
    using A = cd::facc_t<T>;
    if (r == Red::Amax || r == Red::Amin) {
      const bool is_max = r == Red::Amax;
      emulate_reduce(plan, src, cd::ExtremeOp<T>{out.data_ptr<T>(), cd::extreme_identity<cd::cmp_t<T>>(is_max), is_max}, sms);
    } else if constexpr (!backend::is_float_v<T>) {
      emulate_reduce(plan, src, cd::SumOp<T, int64_t, int64_t>{out.data_ptr<int64_t>(), 1}, sms);
    } else if (r == Red::Sum || r == Red::Mean) {
      emulate_reduce(plan, src, cd::SumOp<T, A, T>{out.data_ptr<T>(), static_cast<A>(r == Red::Mean ? n : 1.0)}, sms);
    } else if (r == Red::Var || r == Red::Std) {
      emulate_reduce(plan, src, cd::VarOp<T>{out.data_ptr<T>(), static_cast<A>(correction), r == Red::Std}, sms);
    } else {
      emulate_reduce(plan, src, cd::LseOp<T>{out.data_ptr<T>()}, sms);
    }
  });
  return out;
}

// max / min values and indices along dim (emulated), as backend::cuda::minmax_index_kernel sets them up.
std::pair<Tensor, Tensor> emulated_index(const Tensor& in, int64_t dim, bool keepdim, bool is_max, int sms) {
  namespace cd = backend::cuda::detail;
  std::vector<bool> mask(static_cast<size_t>(in.dim()), false);
  if (in.dim() > 0) mask[dim] = true;
  const Shape os = backend::reduced_shape(in.sizes(), mask, keepdim);
  Tensor values = full(os, 12345, TensorOptions().dtype(in.dtype())), indices = full(os, -9, TensorOptions().dtype(kInt64));
  const ReducePlan plan = backend::make_reduce_plan(values, in, mask, keepdim, true);
  backend::dispatch_all(in.dtype(), "emulated", [&]<typename T>() {
    emulate_reduce(plan, static_cast<const T*>(in.data_ptr()),
                   cd::ExtremeIndexOp<T>{values.data_ptr<T>(), indices.data_ptr<int64_t>(), cd::extreme_identity<cd::cmp_t<T>>(is_max), is_max}, sms);
  });
  return {values, indices};
}

Tensor emulated_norm(const Tensor& in, double p, int sms) {
  namespace cd = backend::cuda::detail;
  Tensor out = full({}, 12345, TensorOptions().dtype(in.dtype()));
  const std::vector<bool> mask(static_cast<size_t>(in.dim()), true);
  const ReducePlan plan = backend::make_reduce_plan(out, in, mask, false, true);
  backend::dispatch_floating(in.dtype(), "emulated", [&]<typename T>() {
    using A = cd::facc_t<T>;
    emulate_reduce(plan, static_cast<const T*>(in.data_ptr()), cd::NormOp<T>{out.data_ptr<T>(), cd::norm_kind(p), static_cast<A>(p)}, sms);
  });
  return out;
}

// Small shapes (every dims list and layout) and large ones (splits across blocks, block rows,
// columns with row groups), with SM counts that change the split.
TEST(CudaReduceEmulated, SumMeanAmaxVarLogsumexpMatchCpu) {
  const Shape shape = {6, 17, 33};
  const std::vector<Shape> dim_lists = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}};
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> views = {
      {"contiguous", [](const Tensor& t) { return t; }},
      {"permuted",
       [](const Tensor& t) {
         return t.permute({2, 0, 1}).contiguous().permute({1, 2, 0});
       }},
      {"broadcast", [](const Tensor& t) { return t.narrow(1, 0, 1).expand(t.sizes()); }}};
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt32, kBool})
    for (const auto& [vname, view] : views) {
      const Tensor x = view(dt == kBool ? dp::gt(sample(shape, kFloat32, 1), 0.0) : sample(shape, kFloat32, 1, -50, 50).to(dt));
      for (const Shape& dims : dim_lists)
        for (bool keepdim : {false, true}) {
          const std::string what = std::string(vname) + " " + dtype_name(dt) + " dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
          test::expect_same_values(emulated(Red::Sum, x, dims, keepdim, 132), dp::sum(x, dims, keepdim), "sum " + what);
          test::expect_same_values(emulated(Red::Amax, x, dims, keepdim, 132), dp::amax(x, dims, keepdim), "amax " + what);
          if (!is_floating_point(dt)) continue;
          test::expect_same_values(emulated(Red::Mean, x, dims, keepdim, 132), dp::mean(x, dims, keepdim), "mean " + what);
          test::expect_same_values(emulated(Red::Var, x, dims, keepdim, 132), dp::var(x, dims, 1, keepdim), "var " + what, 1e-4);
          test::expect_same_values(emulated(Red::Std, x, dims, keepdim, 132, 0), dp::std(x, dims, 0, keepdim), "std " + what, 1e-4);
          test::expect_same_values(emulated(Red::Lse, x, dims, keepdim, 132), dp::logsumexp(x, dims, keepdim), "logsumexp " + what);
        }
    }
  struct Case {
    Shape shape, dims;
  };
  const std::vector<Case> large = {{{3, 300000}, {1}},      {{20000, 40}, {0}}, {{4097, 3}, {}},
                                   {{2, 3000, 70}, {0, 2}}, {{5, 2049}, {1}},   {{100000, 5}, {1}}};
  for (const Case& c : large)
    for (int sms : {1, 8, 132}) {
      const Tensor x = sample(c.shape, kFloat32, 2, 0.5, 2.0);
      const std::string what = shape_str(c.shape) + " dims " + shape_str(c.dims) + " sms " + std::to_string(sms);
      test::expect_same_values(emulated(Red::Sum, x, c.dims, false, sms), dp::sum(x, c.dims), "sum " + what, 1e-5);
      test::expect_same_values(emulated(Red::Amin, x, c.dims, false, sms), dp::neg(dp::amax(dp::neg(x), c.dims)), "amin " + what);
      test::expect_same_values(emulated(Red::Var, x, c.dims, false, sms), dp::var(x, c.dims), "var " + what, 1e-4);
      test::expect_same_values(emulated(Red::Lse, x, c.dims, false, sms), dp::logsumexp(x, c.dims), "logsumexp " + what, 1e-5);
    }
}

TEST(CudaReduceEmulated, IndicesTiesAndNanMatchCpu) {
  for (const Shape& shape : {Shape{7, 1000}, Shape{3, 300000}, Shape{30000, 3}, Shape{5000, 10}})
    for (int sms : {1, 132}) {
      // Few distinct values: ties within threads, warps, blocks and across splits.
      Tensor x = sample(shape, kFloat32, 3, 0, 3).to(kInt64).to(kFloat32);
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) {  // NaN at a few places (the first NaN wins)
          float* q = x.data_ptr<float>();
          q[x.numel() / 3] = q[x.numel() / 3 + 7] = q[x.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
        }
        for (int64_t dim = 0; dim < x.dim(); ++dim)
          for (bool is_max : {true, false}) {
            const auto got = emulated_index(x, dim, false, is_max, sms);
            const auto ref = is_max ? dp::max(x, dim) : dp::min(x, dim);
            const std::string what = std::string(is_max ? "max " : "min ") + shape_str(shape) + " dim " + std::to_string(dim) +
                                     (pass ? " with NaN" : "") + " sms " + std::to_string(sms);
            test::expect_same_values(got.first, ref.first, what + " values");
            test::expect_same_values(got.second, ref.second, what + " indices");
          }
      }
    }
  // Flattened argmax over a long vector of ties: index 0.
  const Tensor z = zeros({1 << 20});
  EXPECT_EQ(emulated_index(z, 0, false, true, 132).second.item<int64_t>(), 0);
  EXPECT_EQ(emulated_index(z, 0, false, false, 132).second.item<int64_t>(), 0);
}

TEST(CudaReduceEmulated, SpecialValuesEmptyAndNorms) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor sp = tensor<double>({-inf, -inf, -inf, 1.0, inf, 2.0, -inf, 3.0, 0.5, nan, 1.0, 2.0}, {4, 3});
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t dim : {0, 1}) {
      const Tensor x = sp.to(dt);
      const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
      test::expect_same_values(emulated(Red::Lse, x, {dim}, false, 132), dp::logsumexp(x, {dim}), "logsumexp specials " + what);
      test::expect_same_values(emulated(Red::Sum, x, {dim}, false, 132), dp::sum(x, {dim}), "sum specials " + what);
      test::expect_same_values(emulated(Red::Amax, x, {dim}, false, 132), dp::amax(x, {dim}), "amax specials " + what);
      test::expect_same_values(emulated(Red::Var, x, {dim}, false, 132), dp::var(x, {dim}), "var specials " + what);
    }
  const Tensor e = zeros({0, 5});
  test::expect_same_values(emulated(Red::Sum, e, {0}, false, 132), dp::sum(e, {0}), "sum over an empty dim");
  test::expect_same_values(emulated(Red::Mean, e, {0}, false, 132), dp::mean(e, {0}), "mean over an empty dim");
  test::expect_same_values(emulated(Red::Var, e, {0}, false, 132), dp::var(e, {0}), "var over an empty dim");
  test::expect_same_values(emulated(Red::Lse, e, {0}, false, 132), dp::logsumexp(e, {0}), "logsumexp over an empty dim");
  test::expect_same_values(emulated(Red::Sum, e, {1}, false, 132), dp::sum(e, {1}), "sum of no rows");
  const Tensor s = full({}, 2.5);
  test::expect_same_values(emulated(Red::Sum, s, {}, false, 132), dp::sum(s), "sum 0-dim");
  test::expect_same_values(emulated(Red::Var, s, {}, false, 132, 0), dp::var(s, {}, 0), "var 0-dim");
  for (DType dt : {kFloat32, kFloat64, kFloat16})
    for (double p : {0.0, 1.0, 2.0, 3.0, 0.5, inf, -inf}) {
      const Tensor x = sample({300, 70}, dt, 4);
      test::expect_same_values(emulated_norm(x, p, 132), dp::norm(x, p), std::string("norm ") + dtype_name(dt) + " p=" + std::to_string(p));
    }
}

// ================================================================ GPU: against the CPU

// Input values for dtype dt: uniform non-zero floats; integers in [-50, 50) (uint8 [0, 100));
// bool about half true.
Tensor host_input(const Shape& sizes, DType dt, uint64_t seed) {
  if (is_floating_point(dt)) return sample(sizes, dt, seed);
  if (dt == kBool) return dp::gt(sample(sizes, kFloat32, seed), Scalar(0.0));
  if (dt == kUInt8) return sample(sizes, kFloat32, seed, 0, 100).to(dt);
  return sample(sizes, kFloat32, seed, -50, 50).to(dt);
}

// A layout of a 3-dim shape: the view applied to a base tensor of base_shape (the same view on
// the host and on the GPU, so the GPU kernels see the strides).
struct Layout {
  const char* name;
  std::function<Shape(const Shape&)> base_shape;
  std::function<Tensor(const Tensor&, const Shape&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {
      {"contiguous", [](const Shape& s) { return s; }, [](const Tensor& t, const Shape&) { return t; }},
      {"permuted",
       [](const Shape& s) {
         return Shape{s[2], s[0], s[1]};
       },
       [](const Tensor& t, const Shape&) {
         return t.permute({1, 2, 0});
       }},
      {"sliced",
       [](const Shape& s) {
         return Shape{s[0], s[1], 2 * s[2]};
       },
       [](const Tensor& t, const Shape&) { return t.slice(2, 0, std::nullopt, 2); }},
      {"broadcast",
       [](const Shape& s) {
         return Shape{s[0], 1, s[2]};
       },
       [](const Tensor& t, const Shape& s) { return t.expand(s); }},
  };
  return l;
}

const std::vector<Shape>& dim_lists() {
  static const std::vector<Shape> d = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {2, 0, 1}};
  return d;
}

using Reduction = std::function<Tensor(const Tensor&)>;

// f on the host input and on its GPU copy (same layout), compared.
void check_layouts(const std::string& what, const Shape& shape, DType dt, uint64_t seed, const Reduction& f, double tol = -1.0) {
  for (const Layout& lay : layouts()) {
    const Tensor base = host_input(lay.base_shape(shape), dt, seed);
    const Tensor h = lay.view(base, shape);
    const Tensor d = lay.view(base.to(kGpu), shape);
    ASSERT_EQ(h.sizes(), shape);
    expect_matches_cpu(f(d), f(h), what + " " + lay.name + " " + dtype_name(dt), tol);
  }
}

std::string dims_str(const Shape& dims, bool keepdim) { return "dims " + shape_str(dims) + (keepdim ? " keepdim" : ""); }

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};
const std::vector<DType> kAll = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool};

TEST(CudaReduce, SumAndMeanEveryDimsListLayoutAndDtype) {
  DP_REQUIRE_GPU();
  const Shape shape = {6, 17, 33};
  for (DType dt : kAll)
    for (const Shape& dims : dim_lists())
      for (bool keepdim : {false, true}) {
        check_layouts("sum " + dims_str(dims, keepdim), shape, dt, 1, [&](const Tensor& t) { return dp::sum(t, dims, keepdim); });
        if (is_floating_point(dt))
          check_layouts("mean " + dims_str(dims, keepdim), shape, dt, 2, [&](const Tensor& t) { return dp::mean(t, dims, keepdim); });
      }
  // sum(dtype=...) converts on the device first.
  Tensor x = host_input({5, 7}, kInt32, 3);
  expect_matches_cpu(dp::sum(x.to(kGpu), {1}, false, kFloat64), dp::sum(x, {1}, false, kFloat64), "sum int32 as float64");
}

TEST(CudaReduce, LargeReductionsThatSplitAcrossBlocks) {
  DP_REQUIRE_GPU();
  struct Case {
    Shape shape;
    Shape dims;
  };
  // Rows split across blocks, columns split in and across blocks, tiny outputs of tall inputs,
  // two reduced dims that do not merge, a plain full reduction.
  const std::vector<Case> cases = {{{3, 300000}, {1}},  {{300000, 3}, {0}}, {{100000, 64}, {0}}, {{2, 3000, 70}, {0, 2}},
                                   {{1 << 22}, {}},     {{64, 65536}, {0}}, {{4097, 3}, {}},     {{5, 2049}, {1}},
                                   {{1 << 18, 5}, {1}}, {{100, 7}, {1}}};  // short contiguous rows: columns
  for (const Case& c : cases)
    for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
      const Tensor h = sample(c.shape, dt, 11, 0.5, 2.0);  // positive: no cancellation in the relative error
      const Tensor d = h.to(kGpu);
      const std::string what = shape_str(c.shape) + " " + dims_str(c.dims, false) + " " + dtype_name(dt);
      expect_matches_cpu(dp::sum(d, c.dims), dp::sum(h, c.dims), "sum " + what);
      expect_matches_cpu(dp::mean(d, c.dims), dp::mean(h, c.dims), "mean " + what);
      expect_matches_cpu(dp::amax(d, c.dims), dp::amax(h, c.dims), "amax " + what);
      expect_matches_cpu(dp::var(d, c.dims), dp::var(h, c.dims), "var " + what, dt == kFloat32 ? 1e-4 : -1.0);
      expect_matches_cpu(dp::logsumexp(d, c.dims), dp::logsumexp(h, c.dims), "logsumexp " + what);
    }
  // Integer sums of many elements: exact.
  const Tensor hi = host_input({1 << 21}, kInt32, 12);
  expect_matches_cpu(dp::sum(hi.to(kGpu)), dp::sum(hi), "sum int32 2^21");
}

TEST(CudaReduce, EmptyAndZeroDimTensors) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    const Tensor e = zeros({0, 5}, TensorOptions().dtype(dt));
    const Tensor de = e.to(kGpu);
    expect_matches_cpu(dp::sum(de, {0}), dp::sum(e, {0}), "sum over an empty dim");
    expect_matches_cpu(dp::sum(de, {1}), dp::sum(e, {1}), "sum of empty rows");
    expect_matches_cpu(dp::sum(de), dp::sum(e), "sum of an empty tensor");
    if (is_floating_point(dt)) {
      expect_matches_cpu(dp::mean(de, {0}), dp::mean(e, {0}), "mean over an empty dim (nan)");
      expect_matches_cpu(dp::var(de, {0}), dp::var(e, {0}), "var over an empty dim (nan)");
      expect_matches_cpu(dp::logsumexp(de, {0}), dp::logsumexp(e, {0}), "logsumexp over an empty dim (-inf)");
      expect_matches_cpu(dp::norm(de), dp::norm(e), "norm of an empty tensor");
    }
    const Tensor s = host_input({}, dt, 13);
    const Tensor ds = s.to(kGpu);
    expect_matches_cpu(dp::sum(ds), dp::sum(s), "sum 0-dim");
    expect_matches_cpu(dp::sum(ds, {0}, true), dp::sum(s, {0}, true), "sum 0-dim dim 0");
    expect_matches_cpu(dp::max(ds), dp::max(s), "max 0-dim");
    expect_matches_cpu(dp::max(ds, 0).second, dp::max(s, 0).second, "max 0-dim dim 0 index");
    expect_matches_cpu(dp::argmax(ds), dp::argmax(s), "argmax 0-dim");
  }
  // The CPU's errors for empty inputs, on the GPU too.
  const Tensor de = zeros({0, 3}, TensorOptions().device(kGpu));
  EXPECT_THROW(dp::max(de), IndexError);
  EXPECT_THROW(dp::max(de, 0), IndexError);
  EXPECT_THROW(dp::argmax(de), IndexError);
  EXPECT_THROW(dp::amax(de, {}), IndexError);
}

TEST(CudaReduce, MaxMinValuesAndIndices) {
  DP_REQUIRE_GPU();
  const Shape shape = {6, 17, 33};
  for (DType dt : kAll)
    for (const Shape& dims : dim_lists())
      for (bool keepdim : {false, true}) {
        check_layouts("amax " + dims_str(dims, keepdim), shape, dt, 4, [&](const Tensor& t) { return dp::amax(t, dims, keepdim); });
        if (dims.size() != 1) continue;
        for (bool is_max : {true, false}) {
          auto f = [&](const Tensor& t) { return is_max ? dp::max(t, dims[0], keepdim) : dp::min(t, dims[0], keepdim); };
          const std::string what = std::string(is_max ? "max" : "min") + " " + dims_str(dims, keepdim);
          check_layouts(what + " values", shape, dt, 5, [&](const Tensor& t) { return f(t).first; });
          check_layouts(what + " indices", shape, dt, 5, [&](const Tensor& t) { return f(t).second; });
          if (dt != kBool)
            check_layouts((is_max ? "argmax " : "argmin ") + dims_str(dims, keepdim), shape, dt, 5,
                          [&](const Tensor& t) { return is_max ? dp::argmax(t, dims[0], keepdim) : dp::argmin(t, dims[0], keepdim); });
        }
      }
  for (DType dt : kAll) {
    check_layouts("max all", shape, dt, 6, [](const Tensor& t) { return dp::max(t); });
    check_layouts("min all", shape, dt, 6, [](const Tensor& t) { return dp::min(t); });
    if (dt == kBool) continue;
    for (bool keepdim : {false, true}) {
      check_layouts("argmax flat", shape, dt, 6, [&](const Tensor& t) { return dp::argmax(t, std::nullopt, keepdim); });
      check_layouts("argmin flat", shape, dt, 6, [&](const Tensor& t) { return dp::argmin(t, std::nullopt, keepdim); });
    }
  }
}

TEST(CudaReduce, IndexTiesGiveTheFirstIndexAcrossThreadsAndBlocks) {
  DP_REQUIRE_GPU();
  // Few distinct values: many ties within a warp, a block and across split blocks.
  for (const Shape& shape : {Shape{7, 1000}, Shape{3, 300000}, Shape{300000, 3}, Shape{50000, 10}, Shape{1 << 20}}) {
    const Tensor h = sample(shape, kFloat32, 21, 0, 3).to(kInt64).to(kFloat32);  // 0, 1, 2
    const Tensor d = h.to(kGpu);
    for (int64_t dim = 0; dim < h.dim(); ++dim) {
      expect_matches_cpu(dp::max(d, dim).second, dp::max(h, dim).second, "max ties indices " + shape_str(shape));
      expect_matches_cpu(dp::min(d, dim).second, dp::min(h, dim).second, "min ties indices " + shape_str(shape));
    }
    expect_matches_cpu(dp::argmax(d), dp::argmax(h), "argmax ties flat " + shape_str(shape));
    expect_matches_cpu(dp::argmin(d), dp::argmin(h), "argmin ties flat " + shape_str(shape));
    // All equal: index 0 everywhere.
    const Tensor z = zeros(shape, TensorOptions().device(kGpu));
    EXPECT_EQ(dp::argmax(z).item<int64_t>(), 0);
    EXPECT_EQ(dp::argmin(z).item<int64_t>(), 0);
    EXPECT_EQ(dp::sum(dp::max(z, 0).second).item<int64_t>(), 0);
  }
}

// x with NaN at a few places (and +-inf elsewhere).
Tensor with_specials(const Shape& shape, uint64_t seed) {
  Tensor h = sample(shape, kFloat64, seed);
  double* p = h.data_ptr<double>();
  const int64_t n = h.numel();
  p[n / 3] = std::numeric_limits<double>::quiet_NaN();
  p[n / 3 + 5] = std::numeric_limits<double>::quiet_NaN();
  p[n / 2] = std::numeric_limits<double>::infinity();
  p[n - 1] = -std::numeric_limits<double>::infinity();
  return h;
}

TEST(CudaReduce, NanAndInfinityPropagateAsOnTheCpu) {
  DP_REQUIRE_GPU();
  for (DType dt : kFloats) {
    const Tensor h = with_specials({9, 40}, 31).to(dt);
    const Tensor d = h.to(kGpu);
    for (int64_t dim : {0, 1}) {
      const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim);
      expect_matches_cpu(dp::sum(d, {dim}), dp::sum(h, {dim}), "sum " + what);
      expect_matches_cpu(dp::mean(d, {dim}), dp::mean(h, {dim}), "mean " + what);
      expect_matches_cpu(dp::amax(d, {dim}), dp::amax(h, {dim}), "amax " + what);
      expect_matches_cpu(dp::max(d, dim).first, dp::max(h, dim).first, "max values " + what);
      expect_matches_cpu(dp::max(d, dim).second, dp::max(h, dim).second, "max indices (first NaN) " + what);
      expect_matches_cpu(dp::min(d, dim).second, dp::min(h, dim).second, "min indices (first NaN) " + what);
      expect_matches_cpu(dp::var(d, {dim}), dp::var(h, {dim}), "var " + what);
      expect_matches_cpu(dp::logsumexp(d, {dim}), dp::logsumexp(h, {dim}), "logsumexp " + what);
    }
    expect_matches_cpu(dp::max(d), dp::max(h), "max all NaN");
    expect_matches_cpu(dp::argmin(d), dp::argmin(h), "argmin all: the first NaN");
    expect_matches_cpu(dp::norm(d, 2.0), dp::norm(h, 2.0), "norm NaN");
  }
  // logsumexp's special rows: all -inf (-inf), a +inf (+inf), -inf next to numbers.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor h = tensor<double>({-inf, -inf, -inf, 1.0, inf, 2.0, -inf, 3.0, 0.5}, {3, 3});
  for (DType dt : kFloats)
    expect_matches_cpu(dp::logsumexp(h.to(kGpu, dt), {1}), dp::logsumexp(h.to(dt), {1}), std::string("logsumexp special rows ") + dtype_name(dt));
}

TEST(CudaReduce, VarStdWithCorrections) {
  DP_REQUIRE_GPU();
  const Shape shape = {6, 17, 33};
  for (DType dt : kFloats)
    for (int64_t correction : {0, 1, 2, 7})
      for (const Shape& dims : {Shape{}, Shape{0}, Shape{2}, Shape{0, 2}, Shape{1, 2}})
        for (bool keepdim : {false, true}) {
          const std::string what = "correction " + std::to_string(correction) + " " + dims_str(dims, keepdim);
          check_layouts("var " + what, shape, dt, 41, [&](const Tensor& t) { return dp::var(t, dims, correction, keepdim); });
          check_layouts("std " + what, shape, dt, 42, [&](const Tensor& t) { return dp::std(t, dims, correction, keepdim); });
        }
  // N <= correction: x / 0 = inf, and 0 / 0 = nan for a single element.
  const Tensor h = sample({4, 3}, kFloat32, 43);
  expect_matches_cpu(dp::var(h.to(kGpu), {1}, 3), dp::var(h, {1}, 3), "var N == correction (inf)");
  expect_matches_cpu(dp::var(h.to(kGpu), {1}, 5), dp::var(h, {1}, 5), "var N < correction (inf)");
  expect_matches_cpu(dp::std(h.to(kGpu).narrow(1, 0, 1), {1}), dp::std(h.narrow(1, 0, 1), {1}), "std of one element (nan)");
  // Values far from 0 (a large mean): Welford keeps the spread.
  const Tensor off = dp::add(sample({8, 5000}, kFloat32, 44), 1000.0);
  expect_matches_cpu(dp::var(off.to(kGpu), {1}), dp::var(off, {1}), "var with a large mean", 1e-3);
}

TEST(CudaReduce, LogsumexpAndNorms) {
  DP_REQUIRE_GPU();
  const Shape shape = {6, 17, 33};
  for (DType dt : kFloats)
    for (const Shape& dims : dim_lists())
      for (bool keepdim : {false, true})
        check_layouts("logsumexp " + dims_str(dims, keepdim), shape, dt, 51, [&](const Tensor& t) { return dp::logsumexp(t, dims, keepdim); });
  // Integer input: promoted to the default float type on the device.
  const Tensor hi = host_input({5, 9}, kInt64, 52);
  expect_matches_cpu(dp::logsumexp(hi.to(kGpu), {1}), dp::logsumexp(hi, {1}), "logsumexp int64");
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : kFloats)
    for (double p : {0.0, 1.0, 2.0, 3.0, 0.5, inf, -inf})
      check_layouts("norm p=" + std::to_string(p), shape, dt, 53, [&](const Tensor& t) { return dp::norm(t, p); });
}

#if DP_HAVE_CUDA

// Calls the CUDA entries directly into NaN-poisoned outputs (keepdim and not): every output
// element must be written.
TEST(CudaReduce, KernelsWriteEveryOutputElement) {
  DP_REQUIRE_GPU();
  const Shape shape = {5, 33, 7};
  const Tensor h = sample(shape, kFloat32, 61);
  const Tensor d = h.to(kGpu);
  for (const Shape& dims : dim_lists())
    for (bool keepdim : {false, true}) {
      const std::vector<bool> mask = backend::make_dim_mask(dims, 3, "test");
      const Shape os = backend::reduced_shape(shape, mask, keepdim);
      const std::string what = dims_str(dims, keepdim);
      auto run = [&](const char* name, const std::function<void(const Tensor&)>& k, const Tensor& ref) {
        Tensor out = test::poisoned(os, kFloat32, kGpu);
        k(out);
        expect_matches_cpu(out, ref, std::string(name) + " " + what);
      };
      run(
          "sum", [&](const Tensor& o) { backend::cuda::sum_kernel(o, d, mask, keepdim); }, dp::sum(h, dims, keepdim));
      run(
          "mean", [&](const Tensor& o) { backend::cuda::mean_kernel(o, d, mask, keepdim); }, dp::mean(h, dims, keepdim));
      run(
          "amax", [&](const Tensor& o) { backend::cuda::minmax_kernel(o, d, mask, keepdim, true); }, dp::amax(h, dims, keepdim));
      run(
          "var", [&](const Tensor& o) { backend::cuda::var_kernel(o, d, mask, keepdim, 1, false); }, dp::var(h, dims, 1, keepdim));
      run(
          "logsumexp", [&](const Tensor& o) { backend::cuda::logsumexp_kernel(o, d, mask, keepdim); }, dp::logsumexp(h, dims, keepdim));
    }
  for (int64_t dim = 0; dim < 3; ++dim) {
    std::vector<bool> mask(3, false);
    mask[dim] = true;
    const Shape os = backend::reduced_shape(shape, mask, false);
    Tensor v = test::poisoned(os, kFloat32, kGpu), i = test::poisoned(os, kInt64, kGpu);
    backend::cuda::minmax_index_kernel(v, i, d, dim, false, false);
    auto ref = dp::min(h, dim);
    expect_matches_cpu(v, ref.first, "min values dim " + std::to_string(dim));
    expect_matches_cpu(i, ref.second, "min indices dim " + std::to_string(dim));
  }
}

TEST(CudaReduce, SameBitsEveryRun) {
  DP_REQUIRE_GPU();
  const Tensor d = sample({1 << 22}, kFloat32, 71).to(kGpu);
  const Tensor m = sample({300000, 3}, kFloat32, 72).to(kGpu);
  EXPECT_TRUE(dp::equal(dp::sum(d), dp::sum(d)));
  EXPECT_TRUE(dp::equal(dp::var(d, {0}), dp::var(d, {0})));
  EXPECT_TRUE(dp::equal(dp::logsumexp(d, {0}), dp::logsumexp(d, {0})));
  EXPECT_TRUE(dp::equal(dp::sum(m, {0}), dp::sum(m, {0})));
  EXPECT_TRUE(dp::equal(dp::norm(m), dp::norm(m)));
}

TEST(CudaReduce, RunsOnTheCurrentStream) {
  DP_REQUIRE_GPU();
  Tensor x = zeros({1 << 20}, TensorOptions().device(kGpu));
  cuda::synchronize(0);
  cuda::Stream side = cuda::Stream::create(0);
  Tensor s;
  {
    cuda::StreamGuard guard(side);
    cuda::detail::sleep_cycles(int64_t(20) * 1000 * 1000, side);  // the fill below waits for this
    dp::fill_(x, Scalar(1.0));
    s = dp::sum(x);  // reads x after the fill only when queued on `side` too
    side.synchronize();
  }
  EXPECT_EQ(s.item<double>(), static_cast<double>(1 << 20));
}

TEST(CudaReduce, InputOnAnotherDeviceIsADeviceError) {
  DP_REQUIRE_GPU();
  const Tensor h = sample({4, 5}, kFloat32, 81);
  Tensor out = empty({4}, TensorOptions().device(kGpu));
  const std::vector<bool> mask = {false, true};
  try {
    backend::cuda::sum_kernel(out, h, mask, false);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("sum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

#endif  // DP_HAVE_CUDA

}  // namespace
}  // namespace dp
