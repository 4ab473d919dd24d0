// conv2d: forward and backward against PyTorch (tests/golden/gen_conv.py) over stride, padding,
// dilation, groups (depthwise too), 1x1, non-square, batch 1 and unbatched inputs; non-contiguous
// inputs; 300 random geometries (float32 and float64) against a direct loop, which reaches every
// im2col/col2im path; finite-difference gradcheck (first and second order) in float64; the public
// backward halves; argument errors.
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>
#include "dp/ops/conv.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_file;
using test::gradcheck;
using test::json;
using test::rand_leaf;
using test::tensor_from_json;

constexpr const char* kFile = "conv.json";

Shape ints(const json& j) { return j.get<Shape>(); }

double tol(const Tensor& t) { return t.dtype() == kFloat64 ? 1e-10 : 1e-4; }

TEST(Conv2dGolden, ForwardAndBackwardMatchPyTorch) {
  int n = 0;
  for (const json& c : golden_file(kFile).at("cases")) {
    if (c.at("op") != "conv2d") continue;
    ++n;
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const json& a = c.at("args");
    const Shape stride = ints(a.at("stride")), padding = ints(a.at("padding")), dilation = ints(a.at("dilation"));
    const int64_t groups = a.at("groups");
    Tensor x = tensor_from_json(c.at("inputs")[0], true);
    Tensor w = tensor_from_json(c.at("inputs")[1], true);
    Tensor b = c.at("inputs")[2].is_null() ? Tensor() : tensor_from_json(c.at("inputs")[2], true);
    Tensor y = conv2d(x, w, b, stride, padding, dilation, groups);
    EXPECT_EQ(y.dtype(), x.dtype());
    EXPECT_TRUE(all_close(y, c.at("output"), tol(x), tol(x)));
    if (x.dim() == 4) {
      EXPECT_EQ(y.grad_fn()->name(), "ConvolutionBackward0");
    }
    y.backward(tensor_from_json(c.at("grad_output")));
    EXPECT_TRUE(all_close(x.grad(), c.at("grads")[0], tol(x), tol(x))) << "grad input";
    EXPECT_TRUE(all_close(w.grad(), c.at("grads")[1], tol(x), tol(x))) << "grad weight";
    if (b.defined()) {
      EXPECT_TRUE(all_close(b.grad(), c.at("grads")[2], tol(x), tol(x))) << "grad bias";
    }
  }
  EXPECT_GE(n, 20);
}

// Only the inputs that require grad get gradients (the first layer's input usually does not).
TEST(Conv2dGolden, PartialRequiresGrad) {
  const json& c = test::golden_case(kFile, "conv_cnn_first");
  const json& a = c.at("args");
  Tensor x = tensor_from_json(c.at("inputs")[0]);
  Tensor w = tensor_from_json(c.at("inputs")[1], true);
  Tensor b = tensor_from_json(c.at("inputs")[2]);
  Tensor y = conv2d(x, w, b, ints(a.at("stride")), ints(a.at("padding")));
  y.backward(tensor_from_json(c.at("grad_output")));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_TRUE(all_close(w.grad(), c.at("grads")[1], 1e-4, 1e-4));
}

TEST(Conv2d, NonContiguousInputsGiveTheSameResult) {
  manual_seed(3);
  Tensor x = randn({2, 3, 6, 7});
  Tensor w = randn({4, 3, 3, 2});
  Tensor b = randn({4});
  Tensor ref = conv2d(x, w, b, {2, 1}, {1, 1});
  // The same values through transposed storage.
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
  Tensor wt = w.permute({1, 0, 2, 3}).contiguous().permute({1, 0, 2, 3});
  Tensor bs = stack({b, b}, 1).select(1, 0);
  ASSERT_FALSE(xt.is_contiguous());
  ASSERT_FALSE(wt.is_contiguous());
  ASSERT_FALSE(bs.is_contiguous());
  EXPECT_TRUE(all_close(conv2d(xt, wt, bs, {2, 1}, {1, 1}), ref, 1e-6, 1e-6));
}

TEST(Conv2d, UnbatchedEqualsBatchOfOne) {
  manual_seed(4);
  Tensor x = randn({3, 5, 6}), w = randn({2, 3, 3, 3}), b = randn({2});
  Tensor y = conv2d(x, w, b, {1}, {1});
  EXPECT_EQ(y.sizes(), (Shape{2, 5, 6}));
  EXPECT_TRUE(all_close(y, conv2d(x.unsqueeze(0), w, b, {1}, {1}).squeeze(0), 1e-6, 1e-6));
}

TEST(Conv2d, EmptyBatch) {
  Tensor x = zeros({0, 2, 5, 5}).requires_grad_(true), w = ones({3, 2, 3, 3}).requires_grad_(true), b = ones({3}).requires_grad_(true);
  Tensor y = conv2d(x, w, b);
  EXPECT_EQ(y.sizes(), (Shape{0, 3, 3, 3}));
  y.sum().backward();
  EXPECT_EQ(x.grad().sizes(), (Shape{0, 2, 5, 5}));
  EXPECT_EQ(w.grad().abs().sum().item<double>(), 0.0);
  EXPECT_EQ(b.grad().abs().sum().item<double>(), 0.0);
}

TEST(Conv2d, ResultDeviceFollowsInput) {
  Tensor x = ones({1, 1, 4, 4}, Device("cpu:1")), w = ones({1, 1, 3, 3}, Device("cpu:1"));
  Tensor y = conv2d(x, w);
  EXPECT_EQ(y.device(), Device("cpu:1"));
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 9.0f));
}

// ---- random geometries against a direct loop ----

struct Naive {
  std::vector<double> y, gx, gw, gb;
};

// conv2d and its gradients for upstream gradient `go`, by the definition (float64).
Naive naive_conv(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b, const std::vector<double>& go,
                 const Shape& xs, const Shape& ws, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int64_t OH,
                 int64_t OW) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OC = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3], OCg = OC / groups;
  Naive r{std::vector<double>(N * OC * OH * OW), std::vector<double>(x.size()), std::vector<double>(w.size()), std::vector<double>(OC)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t o = ((n * OC + oc) * OH + oh) * OW + ow;
          double s = b.empty() ? 0.0 : b[oc];
          r.gb[oc] += go[o];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + (oc / OCg) * Cg + c) * H + ih) * W + iw, wi = ((oc * Cg + c) * KH + kh) * KW + kw;
                s += x[xi] * w[wi];
                r.gx[xi] += go[o] * w[wi];
                r.gw[wi] += go[o] * x[xi];
              }
          r.y[o] = s;
        }
  return r;
}

TEST(Conv2d, RandomGeometriesMatchDirectLoop) {
  std::mt19937 rng(1234);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int checked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const int64_t groups = pick(1, 3), Cg = pick(1, 3), OCg = pick(1, 3);
    const int64_t KH = pick(1, 4), KW = pick(1, 4), sh = pick(1, 3), sw = pick(1, 3), dh = pick(1, 3), dw = pick(1, 3);
    const int64_t ph = pick(0, 3), pw = pick(0, 3), H = pick(1, 9), W = pick(1, 9), N = pick(1, 2);
    const int64_t ekh = (KH - 1) * dh + 1, ekw = (KW - 1) * dw + 1;
    if (ekh > H + 2 * ph || ekw > W + 2 * pw) continue;
    const int64_t OH = (H + 2 * ph - ekh) / sh + 1, OW = (W + 2 * pw - ekw) / sw + 1;
    const Shape xs{N, groups * Cg, H, W}, ws{groups * OCg, Cg, KH, KW};
    const bool bias = pick(0, 1) == 1;
    for (DType dt : {kFloat64, kFloat32}) {
      SCOPED_TRACE(::testing::Message() << "x " << shape_str(xs) << " w " << shape_str(ws) << " stride " << sh << "," << sw << " pad " << ph << ","
                                        << pw << " dil " << dh << "," << dw << " groups " << groups << " " << dtype_name(dt));
      Tensor x = randn(xs, dt).requires_grad_(true), w = randn(ws, dt).requires_grad_(true);
      Tensor b = bias ? randn({ws[0]}, dt).requires_grad_(true) : Tensor();
      Tensor go = randn({N, ws[0], OH, OW}, dt);
      Tensor y = conv2d(x, w, b, {sh, sw}, {ph, pw}, {dh, dw}, groups);
      ASSERT_EQ(y.sizes(), (Shape{N, ws[0], OH, OW}));
      y.backward(go);
      Naive ref = naive_conv(x.to_vector<double>(), w.to_vector<double>(), bias ? b.to_vector<double>() : std::vector<double>{},
                             go.to_vector<double>(), xs, ws, sh, sw, ph, pw, dh, dw, groups, OH, OW);
      const double t = dt == kFloat64 ? 1e-12 : 1e-5;
      EXPECT_TRUE(all_close(y, tensor<double>(ref.y, y.sizes()), t, t));
      EXPECT_TRUE(all_close(x.grad(), tensor<double>(ref.gx, xs), t, t)) << "grad input";
      EXPECT_TRUE(all_close(w.grad(), tensor<double>(ref.gw, ws), t, t)) << "grad weight";
      if (bias) {
        EXPECT_TRUE(all_close(b.grad(), tensor<double>(ref.gb, {ws[0]}), t, t)) << "grad bias";
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

// ---- finite differences (float64) ----

using dp::test::gradgradcheck;

struct GradCase {
  const char* name;
  Shape x, w;
  bool bias;
  Shape stride, padding, dilation;
  int64_t groups;
};

const GradCase kGradCases[] = {
    {"basic", {2, 2, 4, 4}, {3, 2, 3, 3}, true, {1}, {0}, {1}, 1},
    {"stride_pad", {1, 2, 5, 4}, {2, 2, 3, 2}, true, {2, 1}, {1, 1}, {1}, 1},
    {"dilation", {1, 1, 6, 5}, {2, 1, 2, 2}, false, {1}, {1, 0}, {2, 3}, 1},
    {"groups", {1, 4, 4, 3}, {4, 2, 2, 2}, true, {1}, {1}, {1}, 2},
    {"depthwise", {2, 3, 4, 4}, {3, 1, 3, 3}, true, {2}, {1}, {1}, 3},
    {"pointwise", {2, 3, 3, 3}, {2, 3, 1, 1}, true, {1}, {0}, {1}, 1},
    {"pointwise_stride", {1, 3, 5, 4}, {2, 3, 1, 1}, false, {2}, {0}, {1}, 1},
    {"same", {1, 2, 4, 5}, {2, 2, 3, 3}, true, {1}, {1}, {1}, 1},
    {"wide_dilation_pad", {1, 2, 3, 2}, {2, 2, 2, 3}, true, {1}, {0, 4}, {1, 4}, 1},
    {"unbatched", {2, 4, 4}, {2, 2, 2, 3}, true, {1}, {1, 0}, {1}, 1},
};

TEST(Conv2dGrad, FiniteDifferences) {
  manual_seed(11);
  for (const GradCase& gc : kGradCases) {
    SCOPED_TRACE(gc.name);
    std::vector<Tensor> in{rand_leaf(gc.x), rand_leaf(gc.w)};
    if (gc.bias) in.push_back(rand_leaf({gc.w[0]}));
    auto f = [gc](const std::vector<Tensor>& t) {
      return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), gc.stride, gc.padding, gc.dilation, gc.groups);
    };
    EXPECT_TRUE(gradcheck(f, in));
  }
}

TEST(Conv2dGrad, SecondOrder) {
  manual_seed(12);
  for (const GradCase& gc : kGradCases) {
    SCOPED_TRACE(gc.name);
    std::vector<Tensor> in{rand_leaf(gc.x), rand_leaf(gc.w)};
    if (gc.bias) in.push_back(rand_leaf({gc.w[0]}));
    auto f = [gc](const std::vector<Tensor>& t) {
      return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), gc.stride, gc.padding, gc.dilation, gc.groups);
    };
    EXPECT_TRUE(gradgradcheck(f, in));
  }
}

TEST(Conv2dGrad, BackwardHalvesAreDifferentiable) {
  manual_seed(13);
  const Shape xs{1, 2, 4, 5}, ws{4, 1, 2, 3};
  auto gi = [&](const std::vector<Tensor>& t) { return conv2d_backward_input(xs, t[0], t[1], {1, 2}, {1}, {1}, 2); };
  auto gw = [&](const std::vector<Tensor>& t) { return conv2d_backward_weight(ws, t[0], t[1], {1, 2}, {1}, {1}, 2); };
  Tensor go = rand_leaf({1, 4, 5, 3});
  EXPECT_TRUE(gradcheck(gi, {go, rand_leaf(ws)}));
  EXPECT_TRUE(gradcheck(gw, {rand_leaf(xs), go}));
  EXPECT_TRUE(gradgradcheck(gi, {go, rand_leaf(ws)}));
  EXPECT_TRUE(gradgradcheck(gw, {rand_leaf(xs), go}));
}

// The backward halves are the adjoints of conv2d: <conv2d(x, w), g> = <x, Gx(g, w)> = <w, Gw(x, g)>.
TEST(Conv2d, BackwardHalvesAreAdjoints) {
  manual_seed(14);
  Tensor x = randn({2, 4, 7, 6}, kFloat64), w = randn({6, 2, 3, 2}, kFloat64);
  Tensor y = conv2d(x, w, {}, {2, 1}, {1, 0}, {1, 2}, 2);
  Tensor g = randn(y.sizes(), kFloat64);
  const double lhs = (y * g).sum().item<double>();
  Tensor gx = conv2d_backward_input(x.sizes(), g, w, {2, 1}, {1, 0}, {1, 2}, 2);
  Tensor gw = conv2d_backward_weight(w.sizes(), x, g, {2, 1}, {1, 0}, {1, 2}, 2);
  EXPECT_NEAR((x * gx).sum().item<double>(), lhs, 1e-9 * std::abs(lhs) + 1e-9);
  EXPECT_NEAR((w * gw).sum().item<double>(), lhs, 1e-9 * std::abs(lhs) + 1e-9);
}

// ---- errors ----

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Conv2dErrors, Shapes) {
  Tensor x = randn({1, 2, 5, 5});
  expect_error<ShapeError>(
      [&] {
        conv2d(randn({5, 5}), randn({4, 2, 3, 3}));
      },
      "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [5, 5]");
  expect_error<ShapeError>([&] { conv2d(x, randn({4, 2, 3})); }, "expected weight to be 4-dimensional");
  expect_error<ShapeError>(
      [&] {
        conv2d(x, randn({3, 1, 3, 3}), {}, {1}, {0}, {1}, 2);
      },
      "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got weight of size [3, 1, 3, 3] instead");
  expect_error<ShapeError>(
      [&] {
        conv2d(x, randn({4, 3, 3, 3}));
      },
      "Given groups=1, weight of size [4, 3, 3, 3], expected input[1, 2, 5, 5] to have 3 channels, but got 2 channels instead");
  expect_error<ShapeError>([&] { conv2d(randn({1, 3, 5, 5}), randn({4, 1, 3, 3}), {}, {1}, {0}, {1}, 2); }, "to have 2 channels, but got 3");
  expect_error<ShapeError>(
      [&] {
        conv2d(x, randn({4, 2, 6, 6}));
      },
      "Calculated padded input size per channel: (5 x 5). Kernel size: (6 x 6). Kernel size can't be greater than actual input size");
  expect_error<ShapeError>([&] { conv2d(x, randn({4, 2, 3, 3}), {}, {1}, {0}, {3}); }, "Kernel size: (7 x 7)");
  expect_error<ShapeError>(
      [&] {
        conv2d(x, randn({4, 2, 3, 3}), randn({3}));
      },
      "Given weight of size [4, 2, 3, 3], expected bias to be 1-dimensional with 4 elements, but got bias of size [3] instead");
  expect_error<ShapeError>(
      [&] {
        conv2d_backward_input({1, 2, 5, 5}, randn({1, 4, 2, 3}), randn({4, 2, 3, 3}), {1}, {0}, {1}, 1);
      },
      "expected grad_output of size [1, 4, 3, 3]");
}

TEST(Conv2dErrors, Arguments) {
  Tensor x = randn({1, 2, 5, 5}), w = randn({4, 2, 3, 3});
  expect_error<ValueError>([&] { conv2d(x, w, {}, {0}); }, "non-positive stride is not supported");
  expect_error<ValueError>([&] { conv2d(x, w, {}, {1, -1}); }, "non-positive stride is not supported");
  expect_error<ValueError>([&] { conv2d(x, w, {}, {1}, {-1}); }, "negative padding is not supported");
  expect_error<ValueError>([&] { conv2d(x, w, {}, {1}, {0}, {0}); }, "dilation should be greater than zero");
  expect_error<ValueError>([&] { conv2d(x, w, {}, {1}, {0}, {1}, 0); }, "non-positive groups is not supported");
  expect_error<ValueError>(
      [&] {
        conv2d(x, w, {}, {1, 2, 3});
      },
      "expected stride to be a single integer value or a list of 2 values to match the convolution dimensions, but got stride=[1, 2, 3]");
  expect_error<ValueError>([&] { conv2d(x, w, {}, {1}, {}); }, "expected padding to be a single integer value or a list of 2 values");
}

TEST(Conv2dErrors, DTypesAndDevices) {
  Tensor x = randn({1, 2, 5, 5}), w = randn({4, 2, 3, 3});
  expect_error<DTypeError>([&] { conv2d(x, w.to(kFloat64)); }, "Input type (float) and weight type (double) should be the same");
  expect_error<DTypeError>([&] { conv2d(x, w, randn({4}, kFloat64)); }, "Input type (float) and bias type (double) should be the same");
  expect_error<DTypeError>([&] { conv2d(x.to(kInt64), w.to(kInt64)); }, "expected a float32, float64 or bfloat16 input, but got int64");
  expect_error<DeviceError>([&] { conv2d(x, w.to(Device("cpu:1"))); }, "expected all tensors to be on the same device");
  expect_error<DeviceError>([&] { conv2d(x, w, zeros({4}, Device("cpu:1"))); }, "cpu:1");
  expect_error<ValueError>([&] { conv2d(Tensor(), w); }, "input is an undefined tensor");
}

}  // namespace
}  // namespace dp
