// Pooling, batch norm and layer norm on CUDA (src/backend/cuda/norm_pool.cu) against the CPU.
//  - Host tests (any machine): the pooling window arithmetic of cuda/pool_windows.h that the CUDA
//    kernels use (forward windows equal the CPU's loops; the backward gathers visit every output
//    whose window holds an input), and the split plan of the two-level reductions.
//  - GPU tests (skip without one): every op forward and backward on cuda:0 equals the CPU result
//    (float32 / float64, odd sizes, padding, dilation, ceil_mode, ties and NaN for max pooling,
//    running statistics, eval mode). Outputs are allocated over NaN-poisoned cached memory, so an
//    element a kernel forgets to write shows up.
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "cuda/half_compare.h"
#include "support/cuda_compare.h"
#if DP_HAVE_CUDA
#include "backend/cuda/norm_pool.h"
#endif
#include "backend/cuda/pool_windows.h"

namespace dp {
namespace {

// ------------------------------------------------------------------ host: window arithmetic

// PyTorch's pooling_output_shape (as src/ops/pooling.cpp).
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  const int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

TEST(CudaPoolWindows, MaxWindowsMatchTheCpuLoopAndBackwardRangesCoverThem) {
  int cases = 0;
  for (int64_t size = 1; size <= 9; ++size)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t pad = 0; pad <= k / 2; ++pad)
          for (int64_t dil = 1; dil <= 3; ++dil)
            for (bool ceil_mode : {false, true}) {
              const int64_t out = pooled_size(size, k, pad, stride, dil, ceil_mode);
              if (out < 1) continue;
              ++cases;
              for (int64_t o = 0; o < out; ++o) {
                // The CPU kernel's loop (src/backend/cpu/pool_kernels.cpp).
                int64_t i0 = o * stride - pad;
                const int64_t i1 = std::min(i0 + (k - 1) * dil + 1, size);
                while (i0 < 0) i0 += dil;
                const auto w = backend::cuda::pool::max_window<int64_t>(o, size, k, stride, pad, dil);
                ASSERT_EQ(w.first, i0);
                ASSERT_EQ(w.end, i1);
                // Every input the window reads has o in its backward range (both index types).
                for (int64_t i = i0; i < i1; i += dil) {
                  const auto r = backend::cuda::pool::max_outputs_over<int64_t>(i, out, k, stride, pad, dil);
                  const auto r32 = backend::cuda::pool::max_outputs_over<int32_t>(static_cast<int32_t>(i), static_cast<int32_t>(out),
                                                                                  static_cast<int32_t>(k), static_cast<int32_t>(stride),
                                                                                  static_cast<int32_t>(pad), static_cast<int32_t>(dil));
                  ASSERT_TRUE(r.first <= o && o < r.end)
                      << "size " << size << " k " << k << " s " << stride << " p " << pad << " d " << dil << " o " << o << " i " << i;
                  ASSERT_EQ(r.first, r32.first);
                  ASSERT_EQ(r.end, r32.end);
                }
              }
            }
  EXPECT_GT(cases, 500);
}

TEST(CudaPoolWindows, AvgBackwardRangesAreExactlyTheWindowsHoldingAnInput) {
  for (int64_t size = 1; size <= 9; ++size)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t pad = 0; pad <= k / 2; ++pad)
          for (bool ceil_mode : {false, true}) {
            const int64_t out = pooled_size(size, k, pad, stride, 1, ceil_mode);
            if (out < 1) continue;
            for (int64_t i = 0; i < size; ++i) {
              std::set<int64_t> want;
              for (int64_t o = 0; o < out; ++o) {
                const auto w = backend::cuda::pool::avg_window<int64_t>(o, size, k, stride, pad);
                if (w.first <= i && i < w.end) want.insert(o);
              }
              const auto r = backend::cuda::pool::avg_outputs_over<int64_t>(i, out, k, stride, pad);
              std::set<int64_t> got;
              for (int64_t o = r.first; o < r.end; ++o) got.insert(o);
              ASSERT_EQ(got, want) << "size " << size << " k " << k << " s " << stride << " p " << pad << " i " << i;
            }
          }
}

TEST(CudaPoolWindows, AvgDivisorsFollowTheCpuRules) {
  // A 3x3 window at the top-left corner with padding 1 of a 4x4 input: 2x2 inside, 3x3 padded.
  const auto h = backend::cuda::pool::avg_window<int64_t>(0, 4, 3, 2, 1), w = backend::cuda::pool::avg_window<int64_t>(0, 4, 3, 2, 1);
  EXPECT_EQ(backend::cuda::pool::avg_divisor<int64_t>(h, w, true, false, 0), 9);
  EXPECT_EQ(backend::cuda::pool::avg_divisor<int64_t>(h, w, false, false, 0), 4);
  EXPECT_EQ(backend::cuda::pool::avg_divisor<int64_t>(h, w, true, true, 5), 5);
  // With ceil_mode a window may run past the padded input: clipped to it for the divisor.
  const auto e = backend::cuda::pool::avg_window<int64_t>(2, 5, 3, 2, 0);  // starts at 4, padded input ends at 5
  EXPECT_EQ(e.first, 4);
  EXPECT_EQ(e.end, 5);
  EXPECT_EQ(e.padded_len, 1);
}

TEST(CudaPoolWindows, AdaptiveBackwardRangesAreExactlyTheWindowsHoldingAnInput) {
  for (int64_t in = 1; in <= 13; ++in)
    for (int64_t out = 0; out <= 15; ++out)
      for (int64_t i = 0; i < in; ++i) {
        std::set<int64_t> want;
        for (int64_t o = 0; o < out; ++o) {
          const auto w = backend::cuda::pool::adaptive_window<int64_t>(o, out, in);
          ASSERT_LT(w.first, w.end);
          if (w.first <= i && i < w.end) want.insert(o);
        }
        const auto r = backend::cuda::pool::adaptive_outputs_over<int64_t>(i, out, in);
        std::set<int64_t> got;
        for (int64_t o = r.first; o < r.end; ++o) got.insert(o);
        ASSERT_EQ(got, want) << "in " << in << " out " << out << " i " << i;
      }
}

#if DP_HAVE_CUDA
TEST(CudaNormPlan, ReductionSplits) {
  // Many channels fill the device alone: one block each.
  EXPECT_EQ(backend::cuda::reduction_splits(1 << 20, 1024, 132), 1);
  // Few channels with many values: blocks enough for four per SM, never under 1024 values each.
  EXPECT_EQ(backend::cuda::reduction_splits(1 << 20, 4, 132), 132);
  EXPECT_EQ(backend::cuda::reduction_splits(4096, 4, 132), 4);
  EXPECT_EQ(backend::cuda::reduction_splits(100, 1, 132), 1);
  EXPECT_EQ(backend::cuda::reduction_splits(0, 3, 132), 1);
  // Capped at 1024.
  EXPECT_EQ(backend::cuda::reduction_splits(int64_t{1} << 40, 1, 1000), 1024);
}
#endif

// ------------------------------------------------------------------ GPU: against the CPU

using test::expect_written_close;
using test::kGpu;
using test::poison_device_cache_all_sizes;
using test::sample;

double tol_for(DType dt) { return dt == kFloat64 ? 1e-11 : 2e-6; }

void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  EXPECT_TRUE(dp::equal(gpu.cpu(), cpu)) << what;
}

// Runs f on CPU leaves and on their GPU copies, backpropagates the same random upstream gradient,
// and compares outputs and the gradients of every input that requires grad.
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
void compare_with_cpu(const Fn& f, const std::vector<Tensor>& cpu_inputs, const std::string& what, double tol, uint64_t seed = 99) {
  std::vector<Tensor> xc, xg;
  for (const Tensor& t : cpu_inputs) {
    if (!t.defined()) {
      xc.emplace_back();
      xg.emplace_back();
      continue;
    }
    const bool rg = t.requires_grad();
    xc.push_back(t.detach().set_requires_grad(rg));
    xg.push_back(t.detach().to(kGpu).set_requires_grad(rg));
  }
  Tensor yc = f(xc);
  poison_device_cache_all_sizes();
  Tensor yg = f(xg);
  expect_written_close(yg, yc, what + " forward", tol, true);
  if (!yc.requires_grad()) return;
  Tensor go = sample(yc.sizes(), yc.dtype(), seed);
  yc.backward(go);
  poison_device_cache_all_sizes();
  yg.backward(go.to(kGpu));
  for (size_t i = 0; i < xc.size(); ++i) {
    if (!xc[i].defined() || !xc[i].requires_grad()) continue;
    expect_written_close(xg[i].grad(), xc[i].grad(), what + " grad of input " + std::to_string(i), tol, true);
  }
}

// ---- pooling ----

struct PoolCase {
  Shape in;
  int64_t k, s, p, d;
  bool ceil_mode;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, 2, 2, 0, 1, false},    // the 2x2 CNN case
      {{2, 3, 7, 9}, 3, 2, 1, 1, false},    // odd sizes, padding
      {{1, 2, 11, 6}, 3, 1, 1, 2, true},    // dilation, stride 1, ceil_mode
      {{3, 4, 5, 5}, 2, 2, 1, 1, true},     // ceil_mode window past the input
      {{2, 5, 13, 17}, 4, 3, 2, 1, false},  // large padding
      {{3, 9, 7}, 3, 2, 0, 1, true},        // unbatched
      {{1, 1, 1, 1}, 1, 1, 0, 1, false},
  };
  return cases;
}

TEST(CudaPool, MaxPoolForwardIndicesAndBackward) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (const PoolCase& c : pool_cases()) {
      const std::string what = "max_pool2d " + shape_str(c.in) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                               std::to_string(c.p) + " d" + std::to_string(c.d) + " " + dtype_name(dt);
      Tensor x = sample(c.in, dt, 7);
      auto [yc, ic] = max_pool2d_with_indices(x, {c.k}, {c.s}, {c.p}, {c.d}, c.ceil_mode);
      poison_device_cache_all_sizes();
      auto [yg, ig] = max_pool2d_with_indices(x.to(kGpu), {c.k}, {c.s}, {c.p}, {c.d}, c.ceil_mode);
      expect_equal(yg, yc, what + " values");
      expect_equal(ig, ic, what + " indices");
      compare_with_cpu([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], {c.k}, {c.s}, {c.p}, {c.d}, c.ceil_mode); },
                       {x.set_requires_grad(true)}, what, tol_for(dt));
    }
  }
}

TEST(CudaPool, MaxPoolTiesAndNaNPickTheCpuIndex) {
  DP_REQUIRE_GPU();
  // Values from {0, 1, 2}: many ties; the first maximum of each window wins. One NaN wins its windows.
  Tensor x = dp::empty({2, 3, 9, 10});
  float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>((i * 7 + i / 10) % 3);
  p[17] = NAN;
  for (int64_t s : {1, 2}) {
    auto [yc, ic] = max_pool2d_with_indices(x, {3}, {s}, {1});
    auto [yg, ig] = max_pool2d_with_indices(x.to(kGpu), {3}, {s}, {1});
    expect_equal(ig, ic, "tie indices, stride " + std::to_string(s));
    expect_written_close(yg, yc, "tie values", 0.0, true);
    // Overlapping windows that pick the same element add their gradients there.
    compare_with_cpu([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3}, {s}, {1}); }, {x.set_requires_grad(true)},
                     "max_pool2d ties backward", 1e-6);
  }
}

TEST(CudaPool, AvgPoolEveryOption) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (const PoolCase& c : pool_cases()) {
      for (bool cip : {true, false}) {
        for (std::optional<int64_t> div : {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
          const std::string what = "avg_pool2d " + shape_str(c.in) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                                   std::to_string(c.p) + (c.ceil_mode ? " ceil" : "") + (cip ? " cip" : "") + (div ? " div3 " : " ") + dtype_name(dt);
          Tensor x = sample(c.in, dt, 11).set_requires_grad(true);
          compare_with_cpu([&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {c.k}, {c.s}, {c.p}, c.ceil_mode, cip, div); }, {x}, what,
                           tol_for(dt));
        }
      }
    }
  }
}

TEST(CudaPool, AdaptiveAvgPool) {
  DP_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 8, 8}, {1, 1}}, {{2, 3, 7, 9}, {3, 4}}, {{1, 2, 5, 6}, {7, 11}}, {{3, 10, 9}, {4, 2}}, {{2, 64, 14, 14}, {7, 7}}};
  for (DType dt : {kFloat32, kFloat64}) {
    for (const auto& [in, out] : cases) {
      Tensor x = sample(in, dt, 5).set_requires_grad(true);
      compare_with_cpu([&](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], out); }, {x},
                       "adaptive_avg_pool2d " + shape_str(in) + " -> " + shape_str(out) + " " + dtype_name(dt), tol_for(dt));
    }
  }
}

// ---- layer norm ----

TEST(CudaLayerNorm, ForwardAndBackwardAgainstCpu) {
  DP_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 7, 33}, {33}}, {{5, 3, 10}, {3, 10}}, {{3, 1000}, {1000}}, {{2, 2049}, {2049}},
      {{300, 16}, {16}},  {{1, 1}, {1}},         {{70000, 4}, {4}}};  // more rows than blocks: the grid-stride loop
  for (DType dt : {kFloat32, kFloat64}) {
    for (const auto& [in, shape] : cases) {
      for (int affine = 0; affine < 3; ++affine) {  // none, weight only, weight and bias
        // A large common offset: the variance must not cancel away.
        Tensor x = sample(in, dt, 21, 95.0, 105.0).set_requires_grad(true);
        Tensor w = affine >= 1 ? sample(shape, dt, 22, 0.5, 1.5).set_requires_grad(true) : Tensor();
        Tensor b = affine >= 2 ? sample(shape, dt, 23).set_requires_grad(true) : Tensor();
        compare_with_cpu([&](const std::vector<Tensor>& v) { return layer_norm(v[0], shape, v[1], v[2], 1e-5); }, {x, w, b},
                         "layer_norm " + shape_str(in) + " over " + shape_str(shape) + " affine " + std::to_string(affine) + " " + dtype_name(dt),
                         dt == kFloat64 ? 1e-10 : 2e-5);
      }
    }
  }
}

// ---- batch norm ----

struct BnCase {
  Shape in;
};

TEST(CudaBatchNorm, TrainingForwardBackwardAndRunningStats) {
  DP_REQUIRE_GPU();
  // [N, C] (channels apart in memory), [N, C, L], [N, C, H, W], and few channels with many values
  // per channel (several blocks per channel: the two-level reduction).
  const std::vector<Shape> shapes = {{16, 5}, {3, 1000}, {4, 3, 7}, {2, 6, 5, 9}, {8, 3, 129, 131}, {1, 2, 3, 1}};
  for (DType dt : {kFloat32, kFloat64}) {
    for (const Shape& s : shapes) {
      for (bool affine : {true, false}) {
        const int64_t C = s[1];
        const std::string what = "batch_norm train " + shape_str(s) + (affine ? " affine " : " ") + dtype_name(dt);
        Tensor x = sample(s, dt, 31, 45.0, 55.0).set_requires_grad(true);
        Tensor w = affine ? sample({C}, dt, 32, 0.5, 1.5).set_requires_grad(true) : Tensor();
        Tensor b = affine ? sample({C}, dt, 33).set_requires_grad(true) : Tensor();
        Tensor rm_c = sample({C}, dt, 34), rv_c = sample({C}, dt, 35, 0.5, 2.0);
        Tensor rm_g = rm_c.to(kGpu), rv_g = rv_c.to(kGpu);
        compare_with_cpu(
            [&](const std::vector<Tensor>& v) {
              const bool gpu = v[0].is_cuda();
              return batch_norm(v[0], gpu ? rm_g : rm_c, gpu ? rv_g : rv_c, v[1], v[2], true, 0.1, 1e-5);
            },
            {x, w, b}, what, dt == kFloat64 ? 1e-10 : 3e-5);
        expect_written_close(rm_g, rm_c, what + " running_mean", dt == kFloat64 ? 1e-12 : 1e-6, true);
        expect_written_close(rv_g, rv_c, what + " running_var", dt == kFloat64 ? 1e-12 : 1e-5, true);
      }
    }
  }
}

TEST(CudaBatchNorm, EvalModeAndFloat64RunningStatsOnFloat32Input) {
  DP_REQUIRE_GPU();
  for (const Shape& s : std::vector<Shape>{{16, 5}, {4, 3, 7}, {2, 6, 5, 9}}) {
    const int64_t C = s[1];
    Tensor x = sample(s, kFloat32, 41).set_requires_grad(true);
    Tensor w = sample({C}, kFloat32, 42, 0.5, 1.5).set_requires_grad(true);
    Tensor b = sample({C}, kFloat32, 43).set_requires_grad(true);
    Tensor rm = sample({C}, kFloat64, 44), rv = sample({C}, kFloat64, 45, 0.5, 2.0);
    Tensor rm_g = rm.to(kGpu), rv_g = rv.to(kGpu);
    compare_with_cpu(
        [&](const std::vector<Tensor>& v) {
          const bool gpu = v[0].is_cuda();
          return batch_norm(v[0], gpu ? rm_g : rm, gpu ? rv_g : rv, v[1], v[2], false, 0.1, 1e-5);
        },
        {x, w, b}, "batch_norm eval " + shape_str(s), 2e-6);
    // Eval leaves the running statistics alone.
    EXPECT_TRUE(dp::equal(rm_g.cpu(), rm));
    EXPECT_TRUE(dp::equal(rv_g.cpu(), rv));
  }
}

TEST(CudaBatchNorm, NonContiguousRunningStatsAreUpdatedInPlace) {
  DP_REQUIRE_GPU();
  Tensor x = sample({6, 4, 5}, kFloat32, 51);
  Tensor buf_c = sample({4, 2}, kFloat32, 52, 0.5, 1.5), buf_g = buf_c.to(kGpu);
  Tensor rm_c = buf_c.select(1, 0), rv_c = buf_c.select(1, 1);  // stride 2
  Tensor rm_g = buf_g.select(1, 0), rv_g = buf_g.select(1, 1);
  const uint32_t v0 = rm_g.version();
  Tensor yc = batch_norm(x, rm_c, rv_c, Tensor(), Tensor(), true, 0.3, 1e-5);
  Tensor yg = batch_norm(x.to(kGpu), rm_g, rv_g, Tensor(), Tensor(), true, 0.3, 1e-5);
  expect_written_close(yg, yc, "batch_norm strided running stats output", 2e-6, true);
  expect_written_close(buf_g, buf_c, "batch_norm strided running stats", 1e-6, true);
  EXPECT_GT(rm_g.version(), v0);
}

TEST(CudaBatchNorm, EmptyBatchLeavesRunningStatsAlone) {
  DP_REQUIRE_GPU();
  Tensor rm = dp::zeros({3}, TensorOptions().device(kGpu)), rv = dp::ones({3}, TensorOptions().device(kGpu));
  Tensor y = batch_norm(dp::empty({0, 3, 4}, TensorOptions().device(kGpu)), rm, rv, Tensor(), Tensor(), true);
  EXPECT_EQ(y.sizes(), (Shape{0, 3, 4}));
  EXPECT_TRUE(dp::equal(rm.cpu(), dp::zeros({3})));
  EXPECT_TRUE(dp::equal(rv.cpu(), dp::ones({3})));
}

#if DP_HAVE_CUDA
TEST(CudaNormPool, OnANonDefaultStream) {
  DP_REQUIRE_GPU();
  // Every kernel (and its scratch memory) on the current stream: on a non-blocking stream, a
  // kernel queued anywhere else would race with its neighbours.
  Tensor x = sample({4, 6, 33, 35}, kFloat32, 61, 5.0, 9.0);
  Tensor rm_c = dp::zeros({6}), rv_c = dp::ones({6});
  Tensor ref = max_pool2d(batch_norm(layer_norm(x, {35}), rm_c, rv_c, Tensor(), Tensor(), true), {3}, {2}, {1});
  ref = avg_pool2d(adaptive_avg_pool2d(ref, {9, 7}), {2});
  Tensor rm_g = dp::zeros({6}, TensorOptions().device(kGpu)), rv_g = dp::ones({6}, TensorOptions().device(kGpu));
  cuda::Stream s = cuda::Stream::create(0);
  Tensor y;
  {
    cuda::StreamGuard guard(s);
    y = max_pool2d(batch_norm(layer_norm(x.to(kGpu), {35}), rm_g, rv_g, Tensor(), Tensor(), true), {3}, {2}, {1});
    y = avg_pool2d(adaptive_avg_pool2d(y, {9, 7}), {2});
  }
  s.synchronize();
  expect_written_close(y, ref, "pool(bn(ln)) on a created stream", 3e-5, true);
  expect_written_close(rv_g, rv_c, "running_var on a created stream", 1e-5, true);
}
#endif

// ---------------------------------------------------------------- float16 / bfloat16

// The CPU's pooling and batch norm take bfloat16 (tests/ops/test_bfloat16.cpp) but not float16, as
// PyTorch's CPU; its layer norm takes neither.
TEST(CudaNormPoolHalf, CpuRefusesHalfTypesNamingCuda) {
  Tensor x = zeros({2, 3, 6, 6}, kFloat16), xb = zeros({2, 3, 6, 6}, kBFloat16);
  for (const std::string& msg :
       {test::error_of<DTypeError>([&] { max_pool2d(x, {2}); }), test::error_of<DTypeError>([&] { avg_pool2d(x, {2}); }),
        test::error_of<DTypeError>([&] {
          adaptive_avg_pool2d(x, {2, 2});
        }),
        test::error_of<DTypeError>([&] { layer_norm(x, {6}); }), test::error_of<DTypeError>([&] { batch_norm(x, {}, {}, {}, {}, true); })}) {
    EXPECT_NE(msg.find("float16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
  }
  const std::string msg = test::error_of<DTypeError>([&] { layer_norm(xb, {6}); });
  EXPECT_NE(msg.find("bfloat16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
}

TEST(CudaNormPoolHalf, PoolingAgainstFloat32Cpu) {
  DP_REQUIRE_GPU();
  const Tensor x = test::sample({3, 4, 11, 9}, kFloat32, 11);
  test::check_half_against_float("max_pool2d 3 stride 2 pad 1", {x}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3}, {2}, {1}); });
  test::check_half_against_float("avg_pool2d 2", {x}, [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {2}); });
  test::check_half_against_float("avg_pool2d 3 pad 1 exclude pad", {x}, [](const std::vector<Tensor>& in) {
    return avg_pool2d(in[0], {3}, {2}, {1}, /*ceil_mode=*/false, /*count_include_pad=*/false);
  });
  test::check_half_against_float("adaptive_avg_pool2d 4x3", {x}, [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {4, 3}); });
}

TEST(CudaNormPoolHalf, LayerNormAgainstFloat32Cpu) {
  DP_REQUIRE_GPU();
  test::check_half_against_float(
      "layer_norm [37] affine",
      {test::sample({6, 5, 37}, kFloat32, 21, 1.0, 3.0), test::sample({37}, kFloat32, 22), test::sample({37}, kFloat32, 23)},
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {37}, in[1], in[2]); });
  test::check_half_against_float("layer_norm [3, 300]", {test::sample({4, 3, 300}, kFloat32, 24)}, [](const std::vector<Tensor>& in) {
    return layer_norm(in[0], {3, 300});
  });
}

TEST(CudaNormPoolHalf, BatchNormTrainingAndRunningStatsAgainstFloat32Cpu) {
  DP_REQUIRE_GPU();
  const std::vector<Tensor> in = {test::sample({8, 5, 6, 7}, kFloat32, 31, 0.5, 2.5), test::sample({5}, kFloat32, 32),
                                  test::sample({5}, kFloat32, 33)};
  test::check_half_against_float("batch_norm training", in, [](const std::vector<Tensor>& t) { return batch_norm(t[0], {}, {}, t[1], t[2], true); });
  for (DType dt : {kBFloat16, kFloat16}) {
    // Running stats in the module's dtype (PyTorch keeps BN buffers in bfloat16 after .to()).
    NoGradGuard no_grad;
    const TensorOptions og = TensorOptions().dtype(dt).device(test::kGpu);
    Tensor rm_c = zeros({5}), rv_c = ones({5}), rm_g = zeros({5}, og), rv_g = ones({5}, og);
    std::vector<Tensor> c, g;
    for (const Tensor& t : in) {
      c.push_back(t.to(dt).to(kFloat32));
      g.push_back(c.back().to(test::kGpu, dt));
    }
    for (int step = 0; step < 3; ++step) {
      Tensor yc = batch_norm(c[0], rm_c, rv_c, c[1], c[2], true, 0.1);
      Tensor yg = batch_norm(g[0], rm_g, rv_g, g[1], g[2], true, 0.1);
      EXPECT_LE(test::rel_err(yg, yc), test::half_tol(dt)) << dtype_name(dt) << " output";
    }
    EXPECT_EQ(rm_g.dtype(), dt);
    EXPECT_LE(test::rel_err(rm_g, rm_c), test::half_tol(dt)) << dtype_name(dt) << " running_mean";
    EXPECT_LE(test::rel_err(rv_g, rv_c), test::half_tol(dt)) << dtype_name(dt) << " running_var";
  }
  test::check_half_against_float("batch_norm eval",
                                 {test::sample({4, 3, 5, 5}, kFloat32, 41), test::sample({3}, kFloat32, 42), test::sample({3}, kFloat32, 43)},
                                 [](const std::vector<Tensor>& in) {
                                   const TensorOptions o = TensorOptions().dtype(in[0].dtype()).device(in[0].device());
                                   Tensor rm = full({3}, 0.25, o), rv = full({3}, 1.5, o);
                                   return batch_norm(in[0], rm, rv, in[1], in[2], false);
                                 });
}

}  // namespace
}  // namespace dp
