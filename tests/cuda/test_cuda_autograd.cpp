// Backward on CUDA against the CPU: the same graph built from the same values on both devices,
// the same upstream gradient, and every leaf's .grad compared (float32 and float64). Covers the
// reductions' gradients and sum_to (broadcasting add / sub / mul / div reduce their gradients back
// to each operand's shape), the softmax family, and a small chain. Every test needs a GPU and
// skips, saying why, without one.
#include <gtest/gtest.h>
#include <functional>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "reduce_compare.h"
#include "support/cuda.h"

namespace dp {
namespace {

using test::expect_matches_cpu;
using test::kGpu;
using test::sample;

using Graph = std::function<Tensor(const std::vector<Tensor>&)>;

// f over leaves made from `values` on the CPU and on the GPU; the forward results and every
// leaf's gradient must match. The upstream gradient is random (the same on both devices).
void check_grads(const std::string& what, const std::vector<Tensor>& values, const Graph& f, double tol = -1.0) {
  std::vector<Tensor> hc, hd;
  for (const Tensor& v : values) {
    Tensor c = v.clone();
    c.requires_grad_(true);
    hc.push_back(c);
    Tensor d = v.to(kGpu);
    d.requires_grad_(true);
    hd.push_back(d);
  }
  const Tensor yc = f(hc), yd = f(hd);
  expect_matches_cpu(yd, yc, what + " forward", tol);
  const Tensor g = sample(yc.sizes(), yc.dtype(), 1000 + yc.numel());
  yc.backward(g);
  yd.backward(g.to(kGpu));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(hd[i].grad().defined()) << what << " leaf " << i;
    expect_matches_cpu(hd[i].grad(), hc[i].grad(), what + " grad of leaf " + std::to_string(i), tol);
  }
}

const std::vector<DType> kTypes = {kFloat32, kFloat64};

TEST(CudaAutograd, BroadcastingBinaryOpsSumGradientsToEachShape) {
  DP_REQUIRE_GPU();
  struct Shapes {
    Shape a, b;
  };
  // Leading dims added, size-1 dims expanded, both operands broadcast, a scalar-like operand.
  const std::vector<Shapes> shapes = {{{4, 1, 5}, {3, 1}}, {{2, 3, 5}, {5}}, {{6, 1}, {1, 7}}, {{3, 4}, {}}, {{1}, {2, 3}}, {{64, 300}, {300}}};
  for (DType dt : kTypes)
    for (const Shapes& s : shapes) {
      const Tensor a = sample(s.a, dt, 1), b = sample(s.b, dt, 2, 0.5, 2.0);  // b non-zero for div
      const std::string what = shape_str(s.a) + " and " + shape_str(s.b) + " " + dtype_name(dt);
      check_grads("add " + what, {a, b}, [](const std::vector<Tensor>& x) { return dp::add(x[0], x[1]); });
      check_grads("sub " + what, {a, b}, [](const std::vector<Tensor>& x) { return dp::sub(x[0], x[1], 2.0); });
      check_grads("mul " + what, {a, b}, [](const std::vector<Tensor>& x) { return dp::mul(x[0], x[1]); });
      check_grads("div " + what, {a, b}, [](const std::vector<Tensor>& x) { return dp::div(x[0], x[1]); });
      check_grads("div swapped " + what, {b, a}, [](const std::vector<Tensor>& x) { return dp::div(x[1], x[0]); });
    }
}

TEST(CudaAutograd, ReductionGradients) {
  DP_REQUIRE_GPU();
  for (DType dt : kTypes) {
    const Tensor x = sample({5, 6, 7}, dt, 3);
    const std::string t = dtype_name(dt);
    check_grads("sum all " + t, {x}, [](const std::vector<Tensor>& v) { return dp::sum(v[0]); });
    check_grads("sum dims 0,2 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::sum(v[0], {0, 2}); });
    check_grads("sum dim 1 keepdim " + t, {x}, [](const std::vector<Tensor>& v) { return dp::sum(v[0], {1}, true); });
    check_grads("mean all " + t, {x}, [](const std::vector<Tensor>& v) { return dp::mean(v[0]); });
    check_grads("mean dims 1,2 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::mean(v[0], {1, 2}); });
    check_grads("max all " + t, {x}, [](const std::vector<Tensor>& v) { return dp::max(v[0]); });
    check_grads("min all " + t, {x}, [](const std::vector<Tensor>& v) { return dp::min(v[0]); });
    check_grads("max dim 1 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::max(v[0], 1).first; });
    check_grads("min dim 2 keepdim " + t, {x}, [](const std::vector<Tensor>& v) { return dp::min(v[0], 2, true).first; });
    check_grads("amax dims 0,1 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::amax(v[0], {0, 1}); });
    check_grads("var dim 2 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::var(v[0], {2}); });
    check_grads("std dims 0,1 correction 0 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::std(v[0], {0, 1}, 0); });
    check_grads("logsumexp dim 1 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::logsumexp(v[0], {1}); });
    check_grads("norm 2 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::norm(v[0]); });
    check_grads("norm 3 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::norm(v[0], 3.0); });
    check_grads("sum_to " + t, {x}, [](const std::vector<Tensor>& v) { return dp::sum_to(v[0], {6, 1}); });
  }
  // Ties: the gradient of max over everything is split evenly among the maxima, as on the CPU.
  const Tensor ties = tensor<double>({1, 3, 3, 2, 3, 0}, {2, 3});
  check_grads("max all with ties", {ties}, [](const std::vector<Tensor>& v) { return dp::max(v[0]); });
  check_grads("amax with ties", {ties}, [](const std::vector<Tensor>& v) { return dp::amax(v[0], {1}); });
}

TEST(CudaAutograd, SoftmaxFamily) {
  DP_REQUIRE_GPU();
  for (DType dt : kTypes) {
    const Tensor x = sample({8, 50}, dt, 4, -3.0, 3.0);
    const std::string t = dtype_name(dt);
    check_grads("softmax dim 1 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::softmax(v[0], 1); });
    check_grads("softmax dim 0 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::softmax(v[0], 0); });
    check_grads("log_softmax dim 1 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::log_softmax(v[0], 1); });
    check_grads("log_softmax dim 0 " + t, {x}, [](const std::vector<Tensor>& v) { return dp::log_softmax(v[0], 0); });
  }
}

TEST(CudaAutograd, SmallChain) {
  DP_REQUIRE_GPU();
  // A bias-and-scale layer, tanh, log_softmax and a weighted mean: every op's backward and the
  // broadcast gradients of w and b (sum_to over the batch) in one graph.
  for (DType dt : kTypes) {
    const Tensor x = sample({32, 10}, dt, 5), w = sample({10}, dt, 6), b = sample({10}, dt, 7);
    const Tensor target = sample({32, 10}, dt, 8, 0.0, 1.0);
    check_grads(std::string("chain ") + dtype_name(dt), {x, w, b, target}, [](const std::vector<Tensor>& v) {
      Tensor h = dp::tanh(dp::add(dp::mul(v[0], v[1]), v[2]));
      Tensor p = dp::log_softmax(h, 1);
      Tensor loss = dp::neg(dp::mean(dp::mul(p, v[3])));
      return dp::add(loss, dp::mul(dp::sum(dp::square(v[1])), 0.01));  // weight decay: w reaches the loss twice
    });
  }
  // Two backward passes accumulate into .grad on the device.
  const Tensor h = sample({4, 3}, kFloat32, 9);
  Tensor xc = h.clone(), xd = h.to(kGpu);
  xc.requires_grad_(true);
  xd.requires_grad_(true);
  for (int i = 0; i < 2; ++i) {
    dp::sum(dp::mul(xc, xc)).backward();
    dp::sum(dp::mul(xd, xd)).backward();
  }
  expect_matches_cpu(xd.grad(), xc.grad(), "accumulated grad");
}

}  // namespace
}  // namespace dp
