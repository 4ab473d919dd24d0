// conv2d on CUDA (cuDNN, src/backend/cuda/conv.cpp) against the CPU.
//  - Host tests (any machine with the CUDA backend built): the batch chunking that keeps cuDNN's
//    32-bit indexing valid, the description and error texts, the TF32 switch.
//  - GPU tests (skip without one): forward, input, weight and bias gradients, and the two exposed
//    backward halves, for stride, padding, dilation, groups (depthwise too), 1x1, odd sizes,
//    unbatched input, an empty batch, float32 and float64; outputs allocated over NaN-poisoned
//    cached memory; argument errors on CUDA tensors.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"
#include "cuda/half_compare.h"
#if DP_HAVE_CUDA
#include "backend/cuda/conv.h"
#include "backend/cuda/cudnn.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA
backend::Conv2dGeometry geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t K) {
  backend::Conv2dGeometry g{};
  g.N = N;
  g.C = C;
  g.H = H;
  g.W = W;
  g.OC = OC;
  g.KH = g.KW = K;
  g.OH = H - K + 1;
  g.OW = W - K + 1;
  g.sh = g.sw = g.dh = g.dw = 1;
  g.groups = 1;
  return g;
}

TEST(CudaConvPlan, BatchChunksKeepEveryTensorUnder2To31Elements) {
  // Small images: the whole batch in one call.
  EXPECT_EQ(backend::cuda::conv_batch_chunk(geometry(64, 3, 32, 32, 16, 3)), 64);
  // 2^26-element images (in or out): 31 images is the most below 2^31.
  const auto big = geometry(100, 64, 1024, 1024, 64, 1);
  const int64_t chunk = backend::cuda::conv_batch_chunk(big);
  EXPECT_EQ(chunk, 31);
  EXPECT_LT(chunk * 64 * 1024 * 1024, int64_t{1} << 31);
  // The output can be the larger side.
  const auto wide = geometry(10, 1, 4096, 4096, 200, 1);
  EXPECT_EQ(backend::cuda::conv_batch_chunk(wide), 0);  // one output image has 200 * 2^24 > 2^31 elements
  const auto fits = geometry(10, 1, 4096, 4096, 100, 1);
  EXPECT_EQ(backend::cuda::conv_batch_chunk(fits), 1);
  // An empty batch still plans one image per call (nothing runs).
  EXPECT_EQ(backend::cuda::conv_batch_chunk(geometry(0, 3, 8, 8, 4, 3)), 1);
}

TEST(CudaConvPlan, DescriptionNamesShapesOptionsDtypeAndDevice) {
  auto g = geometry(2, 4, 9, 9, 6, 3);
  g.groups = 2;
  g.sh = 2;
  g.ph = 1;
  const std::string d = backend::cuda::conv_description(g, kFloat32, Device::cuda(1));
  EXPECT_NE(d.find("input [2, 4, 9, 9]"), std::string::npos) << d;
  EXPECT_NE(d.find("weight [6, 2, 3, 3]"), std::string::npos) << d;
  EXPECT_NE(d.find("stride [2, 1]"), std::string::npos) << d;
  EXPECT_NE(d.find("padding [1, 0]"), std::string::npos) << d;
  EXPECT_NE(d.find("groups 2"), std::string::npos) << d;
  EXPECT_NE(d.find("float32"), std::string::npos) << d;
  EXPECT_NE(d.find("cuda:1"), std::string::npos) << d;
}

TEST(CudaConvPlan, CudnnErrorMessageAndTf32Switch) {
  const std::string m =
      backend::cuda::cudnn::error_message("cudnn", "CUDNN_STATUS_BAD_PARAM", 2000, "cudnnConvolutionForward(...)", "input [1, 2, 3, 4]");
  EXPECT_EQ(m, "cudnn: cuDNN error CUDNN_STATUS_BAD_PARAM (2000): cudnnConvolutionForward(...) [input [1, 2, 3, 4]]");
  EXPECT_EQ(backend::cuda::cudnn::error_message("x", "S", 1, "call", ""), "x: cuDNN error S (1): call");
  EXPECT_FALSE(backend::cuda::cudnn::allow_tf32());  // off by default: float32 convolutions at full precision
  backend::cuda::cudnn::set_allow_tf32(true);
  EXPECT_TRUE(backend::cuda::cudnn::allow_tf32());
  backend::cuda::cudnn::set_allow_tf32(false);
}
#endif

// ------------------------------------------------------------------ GPU: against the CPU

using test::expect_written_close;
using test::kGpu;
using test::poison_device_cache_all_sizes;
using test::sample;

// float32 through cuDNN's FMA algorithms (implicit GEMM, Winograd, FFT) differs from the CPU's
// GEMM by rounding only (Winograd and FFT round more than a GEMM): well under 1e-3 relative.
double tol_for(DType dt) { return dt == kFloat64 ? 1e-11 : 1e-4; }

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{2, 3, 7, 9}, {4, 3, 3, 3}, {1}, {1}, {1}, 1, true},              // odd sizes, same padding
      {{2, 4, 10, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, false},  // asymmetric everything, groups
      {{3, 6, 8, 8}, {6, 1, 3, 3}, {1}, {1}, {1}, 6, true},              // depthwise
      {{1, 5, 13, 7}, {3, 5, 1, 1}, {1}, {0}, {1}, 1, true},             // pointwise
      {{2, 8, 9, 9}, {16, 8, 5, 5}, {2}, {2}, {1}, 1, true},             // strided 5x5
      {{4, 3, 32, 32}, {8, 3, 3, 3}, {1}, {1}, {1}, 1, true},            // a CNN's first layer
      {{2, 4, 6, 6}, {4, 4, 3, 3}, {3}, {0}, {2}, 1, true},              // dilation 2, stride 3
      {{2, 16, 12, 12}, {32, 4, 3, 3}, {1}, {2}, {2}, 4, true},          // dilated grouped
      {{3, 7, 7}, {2, 3, 3, 3}, {1}, {1}, {1}, 1, true},                 // unbatched
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {1}, {0}, {1}, 1, true},              // empty batch
  };
  return cases;
}

std::string describe(const ConvCase& c, DType dt) {
  return "conv2d x" + shape_str(c.x) + " w" + shape_str(c.w) + " s" + shape_str(c.stride) + " p" + shape_str(c.padding) + " d" +
         shape_str(c.dilation) + " g" + std::to_string(c.groups) + (c.bias ? " bias " : " ") + dtype_name(dt);
}

TEST(CudaConv, ForwardAndGradientsAgainstCpu) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (const ConvCase& c : conv_cases()) {
      const std::string what = describe(c, dt);
      Tensor x = sample(c.x, dt, 1).set_requires_grad(true);
      Tensor w = sample(c.w, dt, 2, -0.5, 0.5).set_requires_grad(true);
      Tensor b = c.bias ? sample({c.w[0]}, dt, 3).set_requires_grad(true) : Tensor();
      Tensor yc = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
      Tensor xg = x.detach().to(kGpu).set_requires_grad(true), wg = w.detach().to(kGpu).set_requires_grad(true);
      Tensor bg = c.bias ? b.detach().to(kGpu).set_requires_grad(true) : Tensor();
      poison_device_cache_all_sizes();
      Tensor yg = conv2d(xg, wg, bg, c.stride, c.padding, c.dilation, c.groups);
      expect_written_close(yg, yc, what + " forward", tol_for(dt), false);
      Tensor go = sample(yc.sizes(), dt, 4);
      yc.backward(go);
      poison_device_cache_all_sizes();
      yg.backward(go.to(kGpu));
      expect_written_close(xg.grad(), x.grad(), what + " grad input", tol_for(dt), false);
      expect_written_close(wg.grad(), w.grad(), what + " grad weight", tol_for(dt), false);
      if (c.bias) expect_written_close(bg.grad(), b.grad(), what + " grad bias", tol_for(dt), false);
    }
  }
}

TEST(CudaConv, OnlyTheGradientsAskedFor) {
  DP_REQUIRE_GPU();
  // Weight frozen, input trainable (and the reverse): the backward computes one half only.
  Tensor x = sample({2, 3, 9, 9}, kFloat32, 5), w = sample({4, 3, 3, 3}, kFloat32, 6, -0.5, 0.5);
  for (bool want_x : {true, false}) {
    Tensor xc = x.detach().set_requires_grad(want_x), wc = w.detach().set_requires_grad(!want_x);
    Tensor xg = x.to(kGpu).set_requires_grad(want_x), wg = w.to(kGpu).set_requires_grad(!want_x);
    Tensor go = sample({2, 4, 9, 9}, kFloat32, 7);
    conv2d(xc, wc, Tensor(), {1}, {1}).backward(go);
    conv2d(xg, wg, Tensor(), {1}, {1}).backward(go.to(kGpu));
    if (want_x)
      expect_written_close(xg.grad(), xc.grad(), "grad input only", tol_for(kFloat32), false);
    else
      expect_written_close(wg.grad(), wc.grad(), "grad weight only", tol_for(kFloat32), false);
    EXPECT_FALSE((want_x ? wg : xg).grad().defined());
  }
}

TEST(CudaConv, BackwardHalvesAgainstCpu) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (const ConvCase& c : conv_cases()) {
      if (c.x.size() != 4) continue;
      const std::string what = describe(c, dt);
      Tensor x = sample(c.x, dt, 8), w = sample(c.w, dt, 9, -0.5, 0.5);
      Tensor y = conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups);
      Tensor go = sample(y.sizes(), dt, 10);
      Tensor gx = conv2d_backward_input(c.x, go, w, c.stride, c.padding, c.dilation, c.groups);
      Tensor gw = conv2d_backward_weight(c.w, x, go, c.stride, c.padding, c.dilation, c.groups);
      poison_device_cache_all_sizes();
      expect_written_close(conv2d_backward_input(c.x, go.to(kGpu), w.to(kGpu), c.stride, c.padding, c.dilation, c.groups), gx,
                           what + " backward_input", tol_for(dt), false);
      poison_device_cache_all_sizes();
      expect_written_close(conv2d_backward_weight(c.w, x.to(kGpu), go.to(kGpu), c.stride, c.padding, c.dilation, c.groups), gw,
                           what + " backward_weight", tol_for(dt), false);
    }
  }
}

TEST(CudaConv, SecondOrderGradientsAgainstCpu) {
  DP_REQUIRE_GPU();
  // d(gx . v + gw . u) / d(x, w), with (gx, gw) = d(conv2d(x, w) . go) / d(x, w) recorded
  // (create_graph): runs the recorded backward halves, each a convolution of its own.
  for (DType dt : {kFloat32, kFloat64}) {
    for (const ConvCase& c : conv_cases()) {
      if (c.x.size() != 4 || c.x[0] == 0) continue;
      const std::string what = describe(c, dt) + " second order";
      Tensor x = sample(c.x, dt, 17), w = sample(c.w, dt, 18, -0.5, 0.5);
      Tensor go = sample(conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups).sizes(), dt, 19);
      Tensor v = sample(c.x, dt, 20), u = sample(c.w, dt, 21);
      auto run = [&](const Device& d) {
        Tensor xd = x.to(d).set_requires_grad(true), wd = w.to(d).set_requires_grad(true);
        Tensor y = conv2d(xd, wd, Tensor(), c.stride, c.padding, c.dilation, c.groups);
        auto g1 = autograd::grad({y}, {xd, wd}, {go.to(d)}, true, true);
        return autograd::grad({g1[0], g1[1]}, {xd, wd}, {v.to(d), u.to(d)});
      };
      const auto ref = run(Device::cpu());
      poison_device_cache_all_sizes();
      const auto got = run(kGpu);
      expect_written_close(got[0], ref[0], what + " d/dx", tol_for(dt), false);
      expect_written_close(got[1], ref[1], what + " d/dw", tol_for(dt), false);
    }
  }
}

#if DP_HAVE_CUDA
TEST(CudaConv, OnANonDefaultStream) {
  DP_REQUIRE_GPU();
  // Everything queued on the current stream (a non-blocking one: work on any other stream would
  // race with it), then read back after it.
  Tensor x = sample({4, 8, 20, 20}, kFloat32, 22), w = sample({8, 8, 3, 3}, kFloat32, 23, -0.5, 0.5), b = sample({8}, kFloat32, 24);
  Tensor ref = conv2d(x, w, b, {1}, {1});
  cuda::Stream s = cuda::Stream::create(0);
  Tensor y;
  {
    cuda::StreamGuard guard(s);
    y = conv2d(x.to(kGpu), w.to(kGpu), b.to(kGpu), {1}, {1});
  }
  s.synchronize();
  expect_written_close(y, ref, "conv2d on a created stream", tol_for(kFloat32), false);
}
#endif

TEST(CudaConv, RepeatedShapesReuseTheCachedAlgorithm) {
  DP_REQUIRE_GPU();
  // Same shape many times, then other batch sizes: results stay identical to the first call.
  Tensor x = sample({4, 8, 16, 16}, kFloat32, 11).to(kGpu), w = sample({8, 8, 3, 3}, kFloat32, 12).to(kGpu);
  Tensor first = conv2d(x, w, Tensor(), {1}, {1}).cpu();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(dp::equal(conv2d(x, w, Tensor(), {1}, {1}).cpu(), first));
  Tensor half = conv2d(x.narrow(0, 0, 2), w, Tensor(), {1}, {1}).cpu();
  expect_written_close(half.to(kGpu), first.narrow(0, 0, 2), "batch of 2 after batch of 4", tol_for(kFloat32), false);
}

#if DP_HAVE_CUDA
TEST(CudaConv, Tf32WhenAllowed) {
  DP_REQUIRE_GPU();
  Tensor x = sample({4, 32, 16, 16}, kFloat32, 13), w = sample({32, 32, 3, 3}, kFloat32, 14, -0.5, 0.5);
  Tensor ref = conv2d(x, w, Tensor(), {1}, {1});
  backend::cuda::cudnn::set_allow_tf32(true);
  Tensor y = conv2d(x.to(kGpu), w.to(kGpu), Tensor(), {1}, {1});
  backend::cuda::cudnn::set_allow_tf32(false);
  expect_written_close(y, ref, "conv2d with TF32 allowed", 1e-2, false);  // TF32: ~1e-3; full precision passes too
  expect_written_close(conv2d(x.to(kGpu), w.to(kGpu), Tensor(), {1}, {1}), ref, "conv2d after TF32 is off again", tol_for(kFloat32), false);
}
#endif

TEST(CudaConv, ArgumentErrorsOnCudaTensors) {
  DP_REQUIRE_GPU();
  Tensor x = sample({1, 3, 5, 5}, kFloat32, 15).to(kGpu), w = sample({2, 3, 3, 3}, kFloat32, 16);
  EXPECT_THROW(conv2d(x, w), DeviceError);                                      // weight on the CPU
  EXPECT_THROW(conv2d(x, w.to(kGpu, kFloat64)), DTypeError);                    // mixed dtypes
  EXPECT_THROW(conv2d(x.to(kInt64), w.to(kGpu, kInt64)), DTypeError);           // integers
  EXPECT_THROW(conv2d(x, w.to(kGpu), Tensor(), {1}, {0}, {1}, 2), ShapeError);  // groups do not divide
}

// ---------------------------------------------------------------- float16 / bfloat16

// The CPU computes bfloat16 (tests/ops/test_bfloat16.cpp) but not float16, as PyTorch's CPU.
TEST(CudaConvHalf, CpuRefusesFloat16NamingCuda) {
  Tensor x = zeros({1, 2, 5, 5}, kFloat16), w = zeros({3, 2, 3, 3}, kFloat16);
  const std::string msg = test::error_of<DTypeError>([&] { conv2d(x, w); });
  EXPECT_NE(msg.find("float16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
}

TEST(CudaConvHalf, ForwardAndGradientsAgainstFloat32Cpu) {
  DP_REQUIRE_GPU();
  auto conv = [](IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups, bool bias) {
    return [=](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], bias ? in[2] : Tensor(), stride, padding, dilation, groups); };
  };
  test::check_half_against_float("conv2d 3x3 pad 1 bias",
                                 {test::sample({4, 3, 12, 10}, kFloat32, 1), test::sample({8, 3, 3, 3}, kFloat32, 2), test::sample({8}, kFloat32, 3)},
                                 conv({1, 1}, {1, 1}, {1, 1}, 1, true));
  test::check_half_against_float("conv2d stride 2 dilation 2 groups 2",
                                 {test::sample({2, 4, 15, 13}, kFloat32, 4), test::sample({6, 2, 3, 2}, kFloat32, 5)},
                                 conv({2, 2}, {0, 1}, {2, 2}, 2, false));
  test::check_half_against_float(
      "conv2d 1x1 bias", {test::sample({3, 16, 7, 7}, kFloat32, 6), test::sample({32, 16, 1, 1}, kFloat32, 7), test::sample({32}, kFloat32, 8)},
      conv({1, 1}, {0, 0}, {1, 1}, 1, true));
}

}  // namespace
}  // namespace dp
