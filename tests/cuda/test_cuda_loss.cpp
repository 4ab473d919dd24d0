// Losses on a CUDA device against the CPU: mse_loss, l1_loss, binary_cross_entropy(_with_logits)
// (weight, pos_weight), nll_loss and cross_entropy (class indices with weights, ignore_index,
// label smoothing, [C] / [N, C] / [N, C, d...] inputs, uint8 targets; class probabilities), every
// reduction, forward and gradients (w.r.t. input and, where differentiable, target), float16 /
// bfloat16 inputs against a float32 reference, the create_graph backward, and bad targets / BCE
// inputs giving the CPU's errors. The GPU tests skip without a GPU; the last test runs anywhere.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"
#if DP_HAVE_CUDA
#include "dp/cuda/graph.h"
#endif

namespace dp {
namespace {

using test::compare;
using test::error_of;
using test::expect_rel;
using test::Fn;
using test::kGpu;
using test::Run;
using test::run_on;
using test::sample;

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

std::string name_of(const std::string& op, Reduction r, DType dt) { return op + " " + reduction_name(r) + " " + dtype_name(dt); }

// Float64 tolerance is loose-ish: the device sums in another order than the CPU's 16 lanes.
double tol(DType dt) { return dt == kFloat64 ? 1e-10 : 2e-6; }

// Class indices in [0, c) with every `every`-th one replaced by `ignore` (when every > 0).
Tensor targets(IntArrayRef sizes, int64_t c, uint64_t seed, int64_t every = 0, int64_t ignore = -100, DType dt = kInt64) {
  Generator g(seed);
  std::vector<int64_t> v = randint(0, c, sizes, kInt64, &g).to_vector<int64_t>();
  if (every > 0)
    for (size_t i = 0; i < v.size(); i += static_cast<size_t>(every)) v[i] = ignore;
  return tensor<int64_t>(v, sizes).to(dt);
}

// The op in float16 / bfloat16 on the GPU against float32 on the CPU (the same rounded values).
void compare_half(const std::string& what, const std::vector<Tensor>& inputs, const std::vector<bool>& diff, const Fn& f, DType half) {
  SCOPED_TRACE(what);
  std::vector<Tensor> h, c;
  for (const Tensor& t : inputs) {
    if (is_floating_point(t.dtype())) {
      h.push_back(t.to(half));
      c.push_back(t.to(half).to(kFloat32));
    } else {
      h.push_back(t);
      c.push_back(t);
    }
  }
  const Run cr = run_on(Device::cpu(), c, diff, f);
  const Run gr = run_on(kGpu, h, diff, f);
  EXPECT_EQ(gr.out.dtype(), half);
  expect_rel(gr.out, cr.out, 1e-2, what + " forward", false);
  ASSERT_EQ(gr.grads.size(), cr.grads.size());
  for (size_t k = 0; k < cr.grads.size(); ++k) expect_rel(gr.grads[k], cr.grads[k], 1e-2, what + " gradient " + std::to_string(k), false);
}

// ---------------------------------------------------------------- element-wise losses

TEST(CudaLoss, MseAndL1EveryReduction) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = sample({4, 5, 6}, dt, 1), t = sample({4, 5, 6}, dt, 2);
    for (Reduction r : kReductions) {
      compare(
          name_of("mse_loss", r, dt), {x, t}, {true, true}, [r](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1], r); }, false, tol(dt));
      compare(
          name_of("l1_loss", r, dt), {x, t}, {true, true}, [r](const std::vector<Tensor>& a) { return l1_loss(a[0], a[1], r); }, false, tol(dt));
    }
    // non-contiguous operands, and a large input (many blocks, many partial sums)
    compare(
        std::string("mse_loss transposed ") + dtype_name(dt), {sample({7, 9}, dt, 3), sample({9, 7}, dt, 4)}, {true, true},
        [](const std::vector<Tensor>& a) { return mse_loss(a[0].t(), a[1]); }, false, tol(dt));
    compare(
        std::string("l1_loss large ") + dtype_name(dt), {sample({1000, 700}, dt, 5), sample({1000, 700}, dt, 6)}, {true, false},
        [](const std::vector<Tensor>& a) { return l1_loss(a[0], a[1], Reduction::Sum); }, false, dt == kFloat64 ? 1e-10 : 1e-5);
  }
  // The mean of nothing is NaN.
  compare(
      "mse_loss of an empty input", {sample({0, 3}, kFloat32, 7), sample({0, 3}, kFloat32, 8)}, {},
      [](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1]); }, false);
}

TEST(CudaLoss, BinaryCrossEntropyWithWeights) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = sample({4, 5, 6}, dt, 9, 0.02, 0.98), t = sample({4, 5, 6}, dt, 10, 0.0, 1.0);
    const Tensor w = sample({5, 1}, dt, 11, 0.2, 2.0);  // broadcasts over dims 0 and 2
    for (Reduction r : kReductions) {
      compare(
          name_of("binary_cross_entropy", r, dt), {x, t}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy(a[0], a[1], Tensor(), r); }, false, tol(dt));
      compare(
          name_of("binary_cross_entropy weighted", r, dt), {x, t, w}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy(a[0], a[1], a[2], r); }, false, tol(dt));
    }
    // inputs at the ends of [0, 1]: the logs clamp at -100, the gradient's denominator at 1e-12
    const Tensor ends = tensor({0.0, 1.0, 0.5, 1e-30, 1.0 - 1e-7}, TensorOptions().dtype(dt));
    compare(
        std::string("binary_cross_entropy at 0 and 1 ") + dtype_name(dt), {ends, tensor({0.3, 0.6, 1.0, 0.0, 0.5}, TensorOptions().dtype(dt))},
        {true, false}, [](const std::vector<Tensor>& a) { return binary_cross_entropy(a[0], a[1], Tensor(), Reduction::None); }, false, tol(dt));
  }
}

TEST(CudaLoss, BinaryCrossEntropyWithLogitsWeightAndPosWeight) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = sample({8, 6}, dt, 12, -4.0, 4.0), t = sample({8, 6}, dt, 13, 0.0, 1.0);
    const Tensor w = sample({8, 1}, dt, 14, 0.2, 2.0), pw = sample({6}, dt, 15, 0.5, 3.0);
    for (Reduction r : kReductions) {
      compare(
          name_of("bce_with_logits", r, dt), {x, t}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy_with_logits(a[0], a[1], Tensor(), Tensor(), r); }, false, tol(dt));
      compare(
          name_of("bce_with_logits weight pos_weight", r, dt), {x, t, w, pw}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy_with_logits(a[0], a[1], a[2], a[3], r); }, false, tol(dt));
    }
  }
}

TEST(CudaLoss, PointwiseLossesInHalfPrecision) {
  DP_REQUIRE_GPU();
  for (DType half : {kFloat16, kBFloat16}) {
    const Tensor x = sample({16, 33}, kFloat64, 16, 0.05, 0.95), t = sample({16, 33}, kFloat64, 17, 0.0, 1.0);
    const Tensor w = sample({33}, kFloat64, 18, 0.5, 1.5);
    for (Reduction r : kReductions) {
      const std::string h = std::string(" ") + reduction_name(r) + " " + dtype_name(half);
      compare_half(
          "mse_loss" + h, {x, t}, {true, true}, [r](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1], r); }, half);
      compare_half(
          "l1_loss" + h, {x, t}, {true, false}, [r](const std::vector<Tensor>& a) { return l1_loss(a[0], a[1], r); }, half);
      compare_half(
          "binary_cross_entropy" + h, {x, t, w}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy(a[0], a[1], a[2], r); }, half);
      compare_half(
          "bce_with_logits" + h, {x, t, w}, {true, true},
          [r](const std::vector<Tensor>& a) { return binary_cross_entropy_with_logits(a[0], a[1], Tensor(), a[2], r); }, half);
    }
  }
}

// ---------------------------------------------------------------- nll_loss

struct ClassCase {
  std::string name;
  Shape input, target;
};

std::vector<ClassCase> class_cases(int64_t c) {
  return {{"[N, C]", {8, c}, {8}}, {"[C]", {c}, {}}, {"[N, C, d1, d2]", {3, c, 4, 5}, {3, 4, 5}}, {"[N, C, d1] long", {2, c, 300}, {2, 300}}};
}

TEST(CudaLoss, NllLossWeightsIgnoreIndexReductions) {
  DP_REQUIRE_GPU();
  const int64_t C = 5;
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor w = sample({C}, dt, 19, 0.2, 2.0);
    for (const ClassCase& cc : class_cases(C)) {
      const Tensor x = sample(cc.input, dt, 20, -4.0, 0.0);
      for (Reduction r : kReductions) {
        for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
          const Tensor t = targets(cc.target, C, 21, cc.target.empty() ? 0 : 3, ignore);
          const std::string what = name_of("nll_loss " + cc.name, r, dt) + " ignore " + std::to_string(ignore);
          compare(
              what, {x, t}, {true}, [r, ignore](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], Tensor(), ignore, r); }, false, tol(dt));
          compare(
              what + " weighted", {x, t, w}, {true}, [r, ignore](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], a[2], ignore, r); },
              false, tol(dt));
        }
      }
    }
    // uint8 targets; every target ignored (Mean is 0 / 0 = NaN, the gradient zero)
    const Tensor x = sample({6, C}, dt, 22, -4.0, 0.0);
    compare(
        std::string("nll_loss uint8 target ") + dtype_name(dt), {x, targets({6}, C, 23, 0, -100, kUInt8), w}, {true},
        [](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], a[2]); }, false, tol(dt));
    compare(
        std::string("nll_loss all ignored ") + dtype_name(dt), {x, full({6}, int64_t{-100}, TensorOptions().dtype(kInt64))}, {true},
        [](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1]); }, false, tol(dt));
  }
  for (DType half : {kFloat16, kBFloat16})
    compare_half(
        std::string("nll_loss ") + dtype_name(half),
        {sample({16, C}, kFloat64, 24, -4.0, 0.0), targets({16}, C, 25, 4), sample({C}, kFloat64, 26, 0.5, 1.5)}, {true},
        [](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], a[2]); }, half);
}

// ---------------------------------------------------------------- cross_entropy

TEST(CudaLoss, CrossEntropyClassIndices) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (int64_t C : {int64_t{5}, int64_t{1000}}) {  // 1000: a warp runs over each row many times
      const Tensor w = sample({C}, dt, 27, 0.2, 2.0);
      for (const ClassCase& cc : class_cases(C)) {
        if (C == 1000 && cc.input.size() > 3) continue;  // keep the big case small
        const Tensor x = sample(cc.input, dt, 28, -6.0, 6.0);
        const Tensor t = targets(cc.target, C, 29, cc.target.empty() ? 0 : 4);
        for (Reduction r : kReductions) {
          for (double ls : {0.0, 0.2}) {
            const std::string what = name_of("cross_entropy " + cc.name + " C " + std::to_string(C), r, dt) + " smoothing " + std::to_string(ls);
            compare(
                what, {x, t}, {true}, [r, ls](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], Tensor(), -100, r, ls); }, false,
                tol(dt) * 10);
            compare(
                what + " weighted", {x, t, w}, {true}, [r, ls](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, r, ls); },
                false, tol(dt) * 10);
          }
        }
      }
    }
    compare(
        std::string("cross_entropy uint8 target, transposed input ") + dtype_name(dt), {sample({7, 9}, dt, 30), targets({9}, 7, 31, 0, -100, kUInt8)},
        {true}, [](const std::vector<Tensor>& a) { return cross_entropy(a[0].t(), a[1]); }, false, tol(dt) * 10);
    compare(
        std::string("cross_entropy all ignored ") + dtype_name(dt), {sample({4, 3}, dt, 32), full({4}, int64_t{1}, TensorOptions().dtype(kInt64))},
        {true}, [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], Tensor(), 1); }, false, tol(dt));
  }
  for (DType half : {kFloat16, kBFloat16})
    compare_half(
        std::string("cross_entropy ") + dtype_name(half),
        {sample({16, 40}, kFloat64, 33, -3.0, 3.0), targets({16}, 40, 34, 5), sample({40}, kFloat64, 35, 0.5, 1.5)}, {true},
        [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, Reduction::Mean, 0.1); }, half);
}

TEST(CudaLoss, CrossEntropyClassProbabilities) {
  DP_REQUIRE_GPU();
  const int64_t C = 6;
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor w = sample({C}, dt, 36, 0.2, 2.0);
    for (const ClassCase& cc : class_cases(C)) {
      const Tensor x = sample(cc.input, dt, 37, -4.0, 4.0);
      const Tensor q = dp::softmax(sample(cc.input, dt, 38), cc.input.size() == 1 ? 0 : 1);
      for (Reduction r : kReductions) {
        for (double ls : {0.0, 0.3}) {
          const std::string what = name_of("cross_entropy probabilities " + cc.name, r, dt) + " smoothing " + std::to_string(ls);
          compare(
              what, {x, q, w}, {true, true}, [r, ls](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, r, ls); }, false,
              tol(dt) * 10);
          compare(
              what + " unweighted", {x, q}, {true, false},
              [r, ls](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], Tensor(), -100, r, ls); }, false, tol(dt) * 10);
        }
      }
    }
  }
  const Tensor x = sample({12, 30}, kFloat64, 39), q = dp::softmax(sample({12, 30}, kFloat64, 40), 1);
  for (DType half : {kFloat16, kBFloat16})
    compare_half(
        std::string("cross_entropy probabilities ") + dtype_name(half), {x, q}, {true, true},
        [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1]); }, half);
}

// ---------------------------------------------------------------- create_graph

// d/dx of sum(grad_x(loss) * v), with the first gradient taken under create_graph.
std::vector<Tensor> second_order(Device dev, const std::vector<Tensor>& inputs, const Fn& f) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) xs.push_back(t.to(dev).detach());
  xs[0].requires_grad_(true);
  Tensor out = f(xs);
  Tensor go = test::sample(out.sizes(), out.dtype(), 41, 0.5, 2.0).to(dev).detach().requires_grad_(true);
  Tensor gx = autograd::grad({out}, {xs[0]}, {go}, true, true)[0];
  Tensor s = dp::sum(dp::mul(gx, test::sample(gx.sizes(), gx.dtype(), 42).to(dev)));
  std::vector<Tensor> r = autograd::grad({s}, {xs[0], go}, {}, false, false, true);
  r.insert(r.begin(), gx.detach());
  return r;
}

TEST(CudaLoss, CreateGraphBackward) {
  DP_REQUIRE_GPU();
  const Tensor x = sample({6, 5}, kFloat64, 43, 0.1, 0.9), t = sample({6, 5}, kFloat64, 44, 0.0, 1.0);
  const Tensor ti = targets({6}, 5, 45, 3), w = sample({5}, kFloat64, 46, 0.5, 1.5);
  const Tensor q = dp::softmax(sample({6, 5}, kFloat64, 47), 1);
  const std::vector<std::pair<std::string, std::pair<std::vector<Tensor>, Fn>>> cases = {
      {"mse_loss", {{x, t}, [](const std::vector<Tensor>& a) { return mse_loss(a[0], a[1]); }}},
      {"binary_cross_entropy", {{x, t}, [](const std::vector<Tensor>& a) { return binary_cross_entropy(a[0], a[1], Tensor(), Reduction::Sum); }}},
      {"bce_with_logits", {{x, t, w}, [](const std::vector<Tensor>& a) { return binary_cross_entropy_with_logits(a[0], a[1], Tensor(), a[2]); }}},
      {"nll_loss mean", {{x, ti, w}, [](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], a[2]); }}},
      {"nll_loss none", {{x, ti}, [](const std::vector<Tensor>& a) { return nll_loss(a[0], a[1], Tensor(), -100, Reduction::None); }}},
      {"cross_entropy mean", {{x, ti, w}, [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, Reduction::Mean, 0.1); }}},
      {"cross_entropy none", {{x, ti}, [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], Tensor(), -100, Reduction::None); }}},
      {"cross_entropy probabilities",
       {{x, q, w}, [](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], a[2], -100, Reduction::Mean, 0.2); }}},
  };
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    const std::vector<Tensor> cpu = second_order(Device::cpu(), c.first, c.second);
    const std::vector<Tensor> gpu = second_order(kGpu, c.first, c.second);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t k = 0; k < cpu.size(); ++k) {
      ASSERT_EQ(cpu[k].defined(), gpu[k].defined()) << k;
      if (cpu[k].defined()) expect_rel(gpu[k], cpu[k], 1e-10, name + " result " + std::to_string(k));
    }
  }
}

// ---------------------------------------------------------------- bad input

TEST(CudaLoss, BadTargetsAndInputsGiveTheCpuErrors) {
  DP_REQUIRE_GPU();
  const Tensor x = sample({4, 5}, kFloat32, 48, -3.0, 0.0);
  const Tensor bad = tensor<int64_t>({1, 7, 2, 9}, {4}), neg = tensor<int64_t>({1, -100, -3, 0}, {4});
  const Tensor x4 = sample({2, 5, 3}, kFloat32, 49), bad4 = tensor<int64_t>({0, 1, 2, 3, 4, 5}, {2, 3});
  using Case = std::function<void(Device)>;
  const std::vector<std::pair<std::string, Case>> cases = {
      {"nll_loss", [&](Device d) { nll_loss(x.to(d), bad.to(d)); }},
      {"nll_loss negative", [&](Device d) { nll_loss(x.to(d), neg.to(d)); }},
      {"nll_loss none", [&](Device d) { nll_loss(x.to(d), bad.to(d), Tensor(), -100, Reduction::None); }},
      {"cross_entropy", [&](Device d) { cross_entropy(x.to(d), bad.to(d)); }},
      {"cross_entropy [N, C, d]", [&](Device d) { cross_entropy(x4.to(d), bad4.to(d), Tensor(), -100, Reduction::Sum, 0.1); }},
  };
  for (const auto& [name, f] : cases) {
    const std::string cpu = error_of<IndexError>([&] { f(Device::cpu()); });
    EXPECT_NE(cpu, "no exception") << name;
    EXPECT_EQ(error_of<IndexError>([&] { f(kGpu); }), cpu) << name;
  }
  // BCE inputs outside [0, 1] (and NaN): the CPU's ValueError (its message names the device).
  for (double v : {1.5, -0.25, std::nan("")}) {
    const Tensor xb = tensor({0.5, v, 0.25});
    const std::string gpu = error_of<ValueError>([&] { binary_cross_entropy(xb.to(kGpu), tensor({0.0, 1.0, 0.5}).to(kGpu)); });
    EXPECT_NE(gpu.find("binary_cross_entropy: all elements of input should be between 0 and 1"), std::string::npos) << gpu;
  }
  // The device still works afterwards.
  expect_rel(nll_loss(x.to(kGpu), tensor<int64_t>({1, 0, 2, 4}, {4}).to(kGpu)), nll_loss(x, tensor<int64_t>({1, 0, 2, 4}, {4})), 1e-6,
             "nll_loss after the errors");
}

// Inside a CUDA graph capture the ops must not wait for the host: the range checks are off there
// and the captured step replays to the eager result.
TEST(CudaLoss, EmbeddingAndLossesCaptureInACudaGraph) {
  DP_REQUIRE_GPU();
#if DP_HAVE_CUDA
  const Tensor w = sample({20, 8}, kFloat32, 50).to(kGpu), idx = targets({6}, 20, 51).to(kGpu), tg = targets({6}, 8, 52).to(kGpu);
  const Tensor p = sample({6, 8}, kFloat32, 53, 0.1, 0.9).to(kGpu);
  auto step = [&] { return dp::add(cross_entropy(embedding(w, idx), tg), dp::add(nll_loss(p, tg), binary_cross_entropy(p, p))); };
  const Tensor eager = step().cpu();
  cuda::CUDAGraph graph;
  Tensor out;
  {
    cuda::GraphCapture capture(graph);
    out = step();
    capture.end();
  }
  graph.replay();
  cuda::synchronize();
  expect_rel(out, eager, 1e-6, "captured embedding + losses");
#endif
}

// Runs without a GPU: the CPU loops take float32 / float64 only, and say that 16-bit floats work on
// a CUDA device.
TEST(LossDtypes, HalfInputOnTheCpuIsADTypeErrorNamingCuda) {
  const Tensor x = zeros({3}, TensorOptions().dtype(kFloat16)), t = zeros({3}, TensorOptions().dtype(kFloat16));
  const std::string msg = error_of<DTypeError>([&] { mse_loss(x, t); });
  EXPECT_NE(msg.find("mse_loss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float16 / bfloat16 on a CUDA device"), std::string::npos) << msg;
  const std::string msg2 = error_of<DTypeError>([&] {
    cross_entropy(zeros({2, 3}, TensorOptions().dtype(kBFloat16)), zeros({2}, TensorOptions().dtype(kInt64)));
  });
  EXPECT_NE(msg2.find("cross_entropy"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace dp
