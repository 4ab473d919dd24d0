// CUDA softmax / log_softmax (src/backend/cuda/softmax.cu) against the CPU: every dim of 1- to 3-dim
// inputs, short rows (a warp each), long rows (a block each), softmax over a non-inner dim
// (columns), float32/float64/float16/bfloat16, special values, non-contiguous inputs, empty and
// 0-dim tensors; the backward kernels directly and through autograd (also create_graph);
// poisoned outputs. The launch choice (cuda/reduce_config.h) is plain C++ and is tested on any
// machine; everything else needs a GPU and skips, saying why, without one.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "backend/cpu/reduce.h"
#include "backend/cuda/reduce_config.h"
#include "backend/cuda/reduce_ops.h"
#include "reduce_compare.h"
#include "support/cuda.h"
#if DP_HAVE_CUDA
#include "backend/cuda/reduce.h"
#endif

namespace dp {
namespace {

using backend::cuda::detail::choose_softmax_launch;
using backend::cuda::detail::SoftmaxLaunch;
using test::expect_matches_cpu;
using test::kGpu;
using test::sample;
using backend::convert;

// ================================================================ host: the launch choice

void expect_softmax_invariants(int64_t outer, int64_t dsize, int64_t inner, const SoftmaxLaunch& l) {
  EXPECT_LE(l.block_x * l.block_y, backend::cuda::detail::kReduceThreads);
  EXPECT_GE(l.block_x, 1);
  EXPECT_GE(l.block_y, 1);
  EXPECT_EQ(l.block_x & (l.block_x - 1), 0) << "block_x a power of two";
  const int64_t units = l.rows ? outer : outer * inner;
  const int64_t per_group = l.rows ? l.block_y : l.block_x;
  EXPECT_GE(l.groups * per_group, units);
  EXPECT_LT((l.groups - 1) * per_group, std::max<int64_t>(units, 1));
  EXPECT_GE(l.grid_x, 1);
  EXPECT_LE(l.grid_x, l.groups);
  if (l.rows) {
    EXPECT_GE(l.block_x, 32) << "whole warps per row";
  }
  (void)dsize;
}

TEST(CudaSoftmaxLaunch, WarpRowsBlockRowsAndColumns) {
  {
    const SoftmaxLaunch l = choose_softmax_launch(100, 10, 1);
    expect_softmax_invariants(100, 10, 1, l);
    EXPECT_TRUE(l.rows);
    EXPECT_EQ(l.block_x, 32);
    EXPECT_EQ(l.block_y, 8);
    EXPECT_EQ(l.groups, 13);
  }
  {
    const SoftmaxLaunch l = choose_softmax_launch(100, 1024, 1);
    EXPECT_TRUE(l.rows);
    EXPECT_EQ(l.block_x, 32);  // up to 1024: a warp per row
  }
  {
    const SoftmaxLaunch l = choose_softmax_launch(4, 1025, 1);
    expect_softmax_invariants(4, 1025, 1, l);
    EXPECT_TRUE(l.rows);
    EXPECT_EQ(l.block_x, 256);  // a block per row
    EXPECT_EQ(l.block_y, 1);
    EXPECT_EQ(l.groups, 4);
  }
  {
    const SoftmaxLaunch l = choose_softmax_launch(2, 50, 1000);
    expect_softmax_invariants(2, 50, 1000, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_x, 32);
    EXPECT_EQ(l.block_y, 8);
  }
  {
    const SoftmaxLaunch l = choose_softmax_launch(1, 1000, 3);
    expect_softmax_invariants(1, 1000, 3, l);
    EXPECT_FALSE(l.rows);
    EXPECT_EQ(l.block_x, 4);
    EXPECT_EQ(l.block_y, 64);  // few columns: most threads split the dim
  }
  for (int64_t outer : {1, 7, 4096})
    for (int64_t dsize : {1, 2, 33, 1000, 5000})
      for (int64_t inner : {1, 2, 31, 64, 3000}) expect_softmax_invariants(outer, dsize, inner, choose_softmax_launch(outer, dsize, inner));
}

// ================================================================ host: the kernels' schedule, emulated

namespace cd = backend::cuda::detail;

Tensor softmax_of(const Tensor& x, int64_t dim, bool log) { return log ? dp::log_softmax(x, dim) : dp::softmax(x, dim); }

// softmax_rows_kernel / softmax_cols_kernel (src/backend/cuda/softmax.cu) on the host, with the same math
// (cuda/reduce_ops.h), partition of each row among threads and combination order.
template <typename T, bool Log>
void emulate_softmax(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using A = cd::facc_t<T>;
  using MS = cd::MaxSum<A>;
  const SoftmaxLaunch l = choose_softmax_launch(outer, n, inner);
  auto combine = [](const MS& a, const MS& b) { return cd::online_combine(a, b); };
  if (l.rows) {
    for (int64_t row = 0; row < outer; ++row) {
      std::vector<MS> lanes(static_cast<size_t>(l.block_x), cd::max_sum_identity<A>());
      for (int tx = 0; tx < l.block_x; ++tx)
        for (int64_t j = tx; j < n; j += l.block_x)
          lanes[static_cast<size_t>(tx)] = cd::online_step(lanes[static_cast<size_t>(tx)], convert<A>(x[row * n + j]));
      const MS ms = test::emulate_group_reduce(lanes, combine);
      for (int64_t j = 0; j < n; ++j) y[row * n + j] = convert<T>(cd::softmax_value<Log>(convert<A>(x[row * n + j]), ms));
    }
    return;
  }
  for (int64_t c = 0; c < outer * inner; ++c) {
    const int64_t o = c / inner, base = o * n * inner + (c - o * inner);
    MS ms = cd::max_sum_identity<A>();
    for (int ty = 0; ty < l.block_y; ++ty) {
      MS t = cd::max_sum_identity<A>();
      for (int64_t d = ty; d < n; d += l.block_y) t = cd::online_step(t, convert<A>(x[base + d * inner]));
      ms = ty == 0 ? t : cd::online_combine(ms, t);
    }
    for (int64_t d = 0; d < n; ++d) y[base + d * inner] = convert<T>(cd::softmax_value<Log>(convert<A>(x[base + d * inner]), ms));
  }
}

template <typename T, bool Log>
void emulate_softmax_backward(const T* g, const T* y, T* gi, int64_t outer, int64_t n, int64_t inner) {
  using A = cd::facc_t<T>;
  const SoftmaxLaunch l = choose_softmax_launch(outer, n, inner);
  auto plus = [](const A& a, const A& b) { return a + b; };
  if (l.rows) {
    for (int64_t row = 0; row < outer; ++row) {
      std::vector<A> lanes(static_cast<size_t>(l.block_x), A(0));
      for (int tx = 0; tx < l.block_x; ++tx)
        for (int64_t j = tx; j < n; j += l.block_x)
          lanes[static_cast<size_t>(tx)] += cd::backward_term<Log>(convert<A>(g[row * n + j]), convert<A>(y[row * n + j]));
      const A t = test::emulate_group_reduce(lanes, plus);
      for (int64_t j = 0; j < n; ++j)
        gi[row * n + j] = convert<T>(cd::backward_value<Log>(convert<A>(g[row * n + j]), convert<A>(y[row * n + j]), t));
    }
    return;
  }
  for (int64_t c = 0; c < outer * inner; ++c) {
    const int64_t o = c / inner, base = o * n * inner + (c - o * inner);
    A t = A(0);
    for (int ty = 0; ty < l.block_y; ++ty) {
      A part = A(0);
      for (int64_t d = ty; d < n; d += l.block_y) part += cd::backward_term<Log>(convert<A>(g[base + d * inner]), convert<A>(y[base + d * inner]));
      t = ty == 0 ? part : t + part;
    }
    for (int64_t d = 0; d < n; ++d) {
      const int64_t i = base + d * inner;
      gi[i] = convert<T>(cd::backward_value<Log>(convert<A>(g[i]), convert<A>(y[i]), t));
    }
  }
}

struct Geo {
  int64_t outer = 1, n = 1, inner = 1;
};
Geo geo_of(const Shape& s, int64_t dim) {
  Geo g;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) (d < dim ? g.outer : d == dim ? g.n : g.inner) *= s[d];
  return g;
}

Tensor emulated_softmax(const Tensor& x, int64_t dim, bool log) {
  const Geo g = geo_of(x.sizes(), dim);
  Tensor y = full(x.sizes(), 12345, TensorOptions().dtype(x.dtype()));
  backend::dispatch_floating(x.dtype(), "emulated", [&]<typename T>() {
    if (log)
      emulate_softmax<T, true>(x.data_ptr<T>(), y.data_ptr<T>(), g.outer, g.n, g.inner);
    else
      emulate_softmax<T, false>(x.data_ptr<T>(), y.data_ptr<T>(), g.outer, g.n, g.inner);
  });
  return y;
}

Tensor emulated_softmax_backward(const Tensor& gr, const Tensor& y, int64_t dim, bool log) {
  const Geo g = geo_of(y.sizes(), dim);
  Tensor gi = full(y.sizes(), 12345, TensorOptions().dtype(y.dtype()));
  backend::dispatch_floating(y.dtype(), "emulated", [&]<typename T>() {
    if (log)
      emulate_softmax_backward<T, true>(gr.data_ptr<T>(), y.data_ptr<T>(), gi.data_ptr<T>(), g.outer, g.n, g.inner);
    else
      emulate_softmax_backward<T, false>(gr.data_ptr<T>(), y.data_ptr<T>(), gi.data_ptr<T>(), g.outer, g.n, g.inner);
  });
  return gi;
}

const std::vector<DType> kHostFloats = {kFloat32, kFloat64, kBFloat16};

struct HostCase {
  Shape shape;
  int64_t dim;
};
const std::vector<HostCase> kHostCases = {{{7, 10}, 1},   {{7, 10}, 0},      {{3, 1000}, 1},    {{3, 1025}, 1}, {{2, 5000}, 1},
                                          {{4, 5, 6}, 1}, {{1, 1000, 3}, 1}, {{2, 50, 100}, 1}, {{100, 33}, 0}, {{17}, 0}};

TEST(CudaSoftmaxEmulated, ForwardAndBackwardMatchCpu) {
  for (const HostCase& c : kHostCases)
    for (DType dt : kHostFloats)
      for (bool log : {false, true}) {
        const std::string what =
            std::string(log ? "log_softmax " : "softmax ") + shape_str(c.shape) + " dim " + std::to_string(c.dim) + " " + dtype_name(dt);
        const Tensor x = sample(c.shape, dt, 1, -4.0, 4.0);
        const Tensor y = softmax_of(x, c.dim, log);
        test::expect_same_values(emulated_softmax(x, c.dim, log), y, what);
        const Tensor g = sample(c.shape, dt, 2);
        Tensor gi = empty(c.shape, TensorOptions().dtype(dt));
        backend::softmax_backward_kernel(gi.device().type, gi, g, y, c.dim, log);
        test::expect_same_values(emulated_softmax_backward(g, y, c.dim, log), gi, "backward " + what);
      }
}

TEST(CudaSoftmaxEmulated, SpecialValuesMatchCpu) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor h = tensor<double>({1, -inf, 2, 0, -inf, -inf, -inf, -inf, 1, inf, 2, 0, inf, 1, inf, 0, 1, nan, 2, 0, -inf, -inf, 5, 1}, {6, 4});
  for (DType dt : {kFloat32, kFloat64})
    for (bool log : {false, true})
      for (int64_t dim : {0, 1}) {
        const Tensor x = h.to(dt);
        test::expect_same_values(emulated_softmax(x, dim, log), softmax_of(x, dim, log),
                                 std::string(log ? "log_softmax" : "softmax") + " specials dim " + std::to_string(dim) + " " + dtype_name(dt));
      }
  // -inf heading a long row (the first lanes see only -inf), a NaN in another.
  Tensor longrow = sample({2, 3000}, kFloat32, 3);
  longrow.narrow(1, 0, 1000).copy_(full({2, 1000}, -inf));
  longrow.select(0, 1).narrow(0, 2000, 1).copy_(full({1}, nan));
  for (bool log : {false, true}) {
    test::expect_same_values(emulated_softmax(longrow, 1, log), softmax_of(longrow, 1, log), "long rows with -inf and NaN");
    const Tensor col = longrow.t().contiguous();
    test::expect_same_values(emulated_softmax(col, 0, log), softmax_of(col, 0, log), "long columns with -inf and NaN");
  }
}

// ================================================================ GPU: against the CPU

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};

struct Case {
  Shape shape;
  int64_t dim;
};

// Short and long rows, several dims of 3-dim tensors, few columns with a long dim.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {{{7, 10}, 1},       {{7, 10}, 0},   {{3, 1000}, -1}, {{3, 1024}, 1}, {{3, 1025}, 1},
                                      {{2, 5000}, 1},     {{4, 5, 6}, 0}, {{4, 5, 6}, 1},  {{4, 5, 6}, 2}, {{1, 1000, 3}, 1},
                                      {{2, 50, 1000}, 1}, {{100, 33}, 0}, {{1, 70000}, 1}, {{17}, 0}};
  return c;
}

std::string case_str(const Case& c, DType dt, bool log) {
  return std::string(log ? "log_softmax " : "softmax ") + shape_str(c.shape) + " dim " + std::to_string(c.dim) + " " + dtype_name(dt);
}

TEST(CudaSoftmax, ForwardMatchesCpu) {
  DP_REQUIRE_GPU();
  for (const Case& c : cases())
    for (DType dt : kFloats)
      for (bool log : {false, true}) {
        const Tensor h = sample(c.shape, dt, 1, -4.0, 4.0);
        expect_matches_cpu(softmax_of(h.to(kGpu), c.dim, log), softmax_of(h, c.dim, log), case_str(c, dt, log));
      }
}

TEST(CudaSoftmax, NonContiguousEmptyAndZeroDimInputs) {
  DP_REQUIRE_GPU();
  const Tensor h = sample({9, 40}, kFloat32, 2);
  const Tensor d = h.to(kGpu);
  for (bool log : {false, true})
    for (int64_t dim : {0, 1}) {
      expect_matches_cpu(softmax_of(d.t(), dim, log), softmax_of(h.t(), dim, log), "transposed dim " + std::to_string(dim));
      expect_matches_cpu(softmax_of(d.slice(1, 0, std::nullopt, 3), dim, log), softmax_of(h.slice(1, 0, std::nullopt, 3), dim, log),
                         "sliced dim " + std::to_string(dim));
    }
  const Tensor s = full({}, 3.5, TensorOptions().device(kGpu));
  EXPECT_EQ(dp::softmax(s, 0).item<double>(), 1.0);
  EXPECT_EQ(dp::log_softmax(s, -1).item<double>(), 0.0);
  const Tensor e = empty({0, 5}, TensorOptions().device(kGpu));
  EXPECT_EQ(dp::softmax(e, 1).sizes(), Shape({0, 5}));
  EXPECT_TRUE(dp::softmax(e, 1).is_cuda());
  // Integer input: the CPU's DTypeError.
  EXPECT_THROW(dp::softmax(zeros({3}, TensorOptions().dtype(kInt64).device(kGpu)), 0), DTypeError);
}

TEST(CudaSoftmax, SpecialValuesAsOnTheCpu) {
  DP_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // Rows: -inf next to numbers, all -inf, a +inf, two +inf, a NaN, -inf first then numbers.
  const Tensor h = tensor<double>({1, -inf, 2, 0, -inf, -inf, -inf, -inf, 1, inf, 2, 0, inf, 1, inf, 0, 1, nan, 2, 0, -inf, -inf, 5, 1}, {6, 4});
  for (DType dt : kFloats)
    for (bool log : {false, true})
      for (int64_t dim : {0, 1}) {
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " specials dim " + std::to_string(dim) + " " + dtype_name(dt);
        expect_matches_cpu(softmax_of(h.to(kGpu, dt), dim, log), softmax_of(h.to(dt), dim, log), what);
      }
  // The same specials in a long row (a block per row) and down a long column.
  Tensor longrow = sample({2, 3000}, kFloat64, 3);
  longrow.narrow(1, 0, 1000).copy_(full({2, 1000}, -inf, TensorOptions().dtype(kFloat64)));
  longrow.select(0, 1).narrow(0, 2000, 1).copy_(full({1}, nan, TensorOptions().dtype(kFloat64)));
  for (bool log : {false, true}) {
    expect_matches_cpu(softmax_of(longrow.to(kGpu, kFloat32), 1, log), softmax_of(longrow.to(kFloat32), 1, log), "long rows with -inf and NaN");
    expect_matches_cpu(softmax_of(longrow.t().contiguous().to(kGpu, kFloat32), 0, log), softmax_of(longrow.t().contiguous().to(kFloat32), 0, log),
                       "long columns with -inf and NaN");
  }
}

TEST(CudaSoftmax, BackwardKernelsMatchCpu) {
  DP_REQUIRE_GPU();
  for (const Case& c : cases())
    for (DType dt : kFloats)
      for (bool log : {false, true}) {
        const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
        const Tensor y = softmax_of(sample(c.shape, dt, 4, -3.0, 3.0), dim, log);
        const Tensor g = sample(c.shape, dt, 5);
        Tensor gi = empty(c.shape, TensorOptions().dtype(dt));
        backend::softmax_backward_kernel(gi.device().type, gi, g, y, dim, log);
        Tensor gid = test::poisoned(c.shape, dt, kGpu);
        backend::softmax_backward_kernel(gid.device().type, gid, g.to(kGpu), y.to(kGpu), dim, log);  // routed to the CUDA kernel
        expect_matches_cpu(gid, gi, "backward " + case_str(c, dt, log));
      }
}

TEST(CudaSoftmax, ForwardKernelsWriteEveryElement) {
  DP_REQUIRE_GPU();
  for (const Case& c : cases())
    for (bool log : {false, true}) {
      const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
      const Tensor h = sample(c.shape, kFloat32, 6);
      Tensor out = test::poisoned(c.shape, kFloat32, kGpu);
      backend::softmax_kernel(out.device().type, out, h.to(kGpu), dim, log);
      expect_matches_cpu(out, softmax_of(h, dim, log), "poisoned " + case_str(c, kFloat32, log));
    }
}

TEST(CudaSoftmax, AutogradMatchesCpu) {
  DP_REQUIRE_GPU();
  for (const Case& c : cases())
    for (bool log : {false, true}) {
      const Tensor h = sample(c.shape, kFloat32, 7);
      const Tensor g = sample(c.shape, kFloat32, 8);
      Tensor xc = h.clone().requires_grad_(true);
      Tensor xd = h.to(kGpu).requires_grad_(true);
      softmax_of(xc, c.dim, log).backward(g);
      softmax_of(xd, c.dim, log).backward(g.to(kGpu));
      ASSERT_TRUE(xd.grad().defined());
      expect_matches_cpu(xd.grad(), xc.grad(), "grad " + case_str(c, kFloat32, log));
    }
}

TEST(CudaSoftmax, DoubleBackwardMatchesCpu) {
  DP_REQUIRE_GPU();
  for (bool log : {false, true})
    for (int64_t dim : {0, 1}) {
      const Tensor h = sample({6, 9}, kFloat64, 9);
      const Tensor v = sample({6, 9}, kFloat64, 10);
      auto second = [&](Tensor x, const Tensor& vv) {
        x.requires_grad_(true);
        Tensor y = softmax_of(x, dim, log);
        Tensor gx = autograd::grad({dp::sum(dp::mul(y, vv))}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
        return autograd::grad({dp::sum(dp::mul(gx, gx))}, {x})[0];
      };
      expect_matches_cpu(second(h.to(kGpu), v.to(kGpu)), second(h.clone(), v), std::string(log ? "log_softmax" : "softmax") + " double backward");
    }
}

TEST(CudaSoftmax, SameBitsEveryRun) {
  DP_REQUIRE_GPU();
  const Tensor d = sample({64, 4000}, kFloat32, 11).to(kGpu);
  EXPECT_TRUE(dp::equal(dp::softmax(d, 1), dp::softmax(d, 1)));
  EXPECT_TRUE(dp::equal(dp::log_softmax(d, 0), dp::log_softmax(d, 0)));
}

}  // namespace
}  // namespace dp
